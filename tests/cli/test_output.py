"""What the user sees: nothing on stderr but mobilize's own lines; a bug in mobilize is exit 1 and
says so, a user mistake exit 2; --version, list, help for users."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NO_RACE

ROOT = Path(__file__).resolve().parents[2]
MOBILIZE = [sys.executable, "-m", "mobilize"]
OWN_LINE = re.compile(r"^(mobilize: |\[\d+/\d+\] )")


def run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    # `tests.compare_plugins` importable in the workers; src/ first, so the tree under test runs
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    return subprocess.run([*MOBILIZE, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)


@pytest.mark.e2e
def test_compare_keeps_third_party_noise_off_stderr(tmp_path):
    """The noisiest variants of the default compare (PT2E int8 with its calibration, ExecuTorch's XNNPACK
    lowering, ONNX Runtime quantization, torchao's kernel-library warnings) on the tiny test model (the same
    libraries speak as for the default model, in half the time): stderr holds nothing but mobilize's own lines."""
    out = tmp_path / "out"
    done = run("compare", "tests.conftest:tiny_model", "--input_dims", "1,3,32,32", "--data", "digits:test",
               "--variant", "eager-fp32", "--variant", "executorch-int8", "--variant", "onnx-int8",
               "--accuracy-samples", "24", "--iter", "4", "--rounds", "1", *NO_RACE, "-o", out)
    assert done.returncode == 0, done.stderr[-3000:]
    foreign = [ln for ln in done.stderr.splitlines() if ln.strip() and not OWN_LINE.match(ln)]
    assert not foreign, foreign[:10]
    assert "[1/" in done.stdout and "executorch-int8" in done.stdout and "time: " in done.stdout
    logs = list((out / "logs").glob("*.log"))
    assert logs, "the runtimes' own output is kept in the output folder"


def test_a_bug_in_a_pass_is_an_internal_error_with_exit_1(tmp_path):
    recipe = tmp_path / "buggy.yaml"
    recipe.write_text("passes: ['tests.compare_plugins:RaisesKeyError']\nexports: [torchscript]\n")
    done = run("optimize", "zoo:conv_bn_relu", "--recipe", recipe, "--input_dims", "1,3,16,16", "-o", tmp_path / "o")
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1 and lines[0].startswith("mobilize: internal error (a bug in mobilize"), lines
    assert "KeyError" in lines[0] and "--debug" in lines[0] and "Traceback" not in done.stderr
    debug = run("--debug", "optimize", "zoo:conv_bn_relu", "--recipe", recipe, "--input_dims", "1,3,16,16",
                "-o", tmp_path / "o2")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "compare_plugins.py" in debug.stderr


def test_a_user_mistake_is_still_exit_2(tmp_path):
    recipe = tmp_path / "wrong.yaml"
    recipe.write_text("passes: [quantize, fuse]\nexports: [torchscript]\n")
    done = run("optimize", "zoo:conv_bn_relu", "--recipe", recipe, "--input_dims", "1,3,16,16", "-o", tmp_path / "o")
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "put fuse before quantize" in lines[0], done.stderr


def test_version_list_and_help():
    version = run("--version")
    assert version.returncode == 0 and re.match(r"mobilize \d+\.\d+", version.stdout)
    listed = run("list", "plans")
    assert listed.returncode == 0 and "default" in listed.stdout and "quick" in listed.stdout
    everything = run("list")
    for kind in ("zoo:", "recipes:", "plans:", "runtimes:", "passes:", "exporters:", "targets:"):
        assert kind in everything.stdout
    assert "zoo:digits_mobilenet_v2" in everything.stdout and "x86-avx2" in everything.stdout
    helped = run("--help")
    assert "fastest artifact" in helped.stdout and "Entry point" not in helped.stdout


@pytest.mark.parametrize("kind", ["bogus"])
def test_list_unknown_kind_is_a_usage_error(kind):
    done = run("list", kind)
    assert done.returncode == 2 and "invalid choice" in done.stderr
