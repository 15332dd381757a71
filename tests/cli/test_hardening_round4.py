"""Issue #39 (hardening, fourth round): concurrent runs, FIFOs, strict JSON, ``--input`` values, frame sizes, options
ignored silently, messages and temporary folders, each through the real command."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_hardening import FOREGROUND_SIGINT, ROOT, TINY, dead_pid, start, wait_for_line
from tests.conftest import assert_one_line_error

VAD = """
import torch

class Vad(torch.nn.Module):
    input_specs = [(1, 32)]

    def forward(self, x, sr: int = 8000):
        return x * (2.0 if sr == 16000 else 1.0)
"""


def strict_json(text: str):
    """JSON as every strict reader parses it: a bare NaN or Infinity fails."""
    def refuse(constant: str):
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def run_bounded(*argv, timeout_s: float = 120, env: dict | None = None) -> tuple[int, str, str]:
    """The real command in its own process, killed after ``timeout_s`` (a FIFO read used to block for ever)."""
    exe = os.path.join(os.path.dirname(sys.executable), "mobilize")
    try:
        proc = subprocess.run([exe, *map(str, argv)], capture_output=True, text=True, timeout=timeout_s,
                              env=env or os.environ)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout_s} s") from None
    return proc.returncode, proc.stdout, proc.stderr


# -- item 2: one run per output folder -------------------------------------------------------------------------
def test_a_second_compare_on_a_folder_in_use_is_refused_and_deletes_nothing(run_cli, tmp_path):
    out = tmp_path / "out"
    first = start("compare", "zoo:conv_bn_relu", "--plan", "quick", *TINY, "--accuracy-samples", "2", "-o", out)
    try:
        wait_for_line(first, "float reference: build the model once")
        before = sorted(p.name for p in out.iterdir())
        code, _, err = run_cli("compare", "zoo:conv_bn_relu", "--plan", "quick", *TINY, "-o", out)
        assert_one_line_error(code, err, f"-o {out} is in use by another mobilize run (pid {first.pid})")
        # nothing of the first's is gone (logs/ among it once the first run has made it: when depends on the load)
        assert set(before) <= {p.name for p in out.iterdir()}, "the second run removed nothing of the first's"
    finally:
        os.kill(first.pid, signal.SIGTERM)
        first.communicate(timeout=120)
    assert not (out / ".mobilize.lock").exists(), "the lock goes with the run that held it"


def test_a_lock_left_by_a_killed_run_is_taken_over_with_a_note(run_cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    gone = dead_pid()
    (out / ".mobilize.lock").write_text(f"{gone}\n")
    code, _, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", "torchscript-fp32", *TINY, "--no-verify",
                           "-o", out)
    assert code == 0, err
    assert f"took over the lock of an earlier run (pid {gone})" in err
    assert not (out / ".mobilize.lock").exists()


# -- item 3: what is not a regular file or folder is refused; an interrupt at exit prints no traceback -----------
@pytest.mark.parametrize("case", ["frames-from", "data", "model-file", "python-file"])
def test_a_fifo_given_as_a_path_is_refused_at_once(tmp_path, case):
    fifo = tmp_path / ("model.onnx" if case == "model-file" else "net.py" if case == "python-file" else "pipe")
    os.mkfifo(fifo)
    argv = {"frames-from": ("bench", "zoo:conv_bn_relu", *TINY, "--frames", "nv21:64x64", "--frames-from", fifo),
            "data": ("bench", "zoo:conv_bn_relu", *TINY, "--data", fifo),
            "model-file": ("bench", fifo),
            "python-file": ("lint", f"{fifo}:Net")}[case]
    code, _, err = run_bounded(*argv, timeout_s=60)
    assert_one_line_error(code, err, f"{fifo} is a FIFO (named pipe), not a regular file or folder")


def test_an_interrupt_during_the_exit_clean_up_prints_no_traceback():
    """An interrupt that lands while the interpreter exits (multiprocessing joining a child, an atexit clean-up) used
    to raise KeyboardInterrupt from the handler into that clean-up: a 12-line traceback after 'interrupted'."""
    script = ("import atexit, os, signal, sys, time\n"
              "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(2)))\n"
              "sys.argv = ['mobilize', 'list', 'recipes']\n"
              "from mobilize.cli.main import main\n"
              "raise SystemExit(main())\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    assert proc.returncode == 130


# -- items 4 and 5: --input values parsed by the forward's types; every JSON strict ------------------------------
@pytest.mark.parametrize("value, fragment", [
    ("sr=1e400", "--input sr=1e400: 1e400 is not a finite number"),
    ("sr=nan", "--input sr=nan: nan is not a finite number"),
    ("sr=inf", "--input sr=inf: inf is not a finite number"),
    ("sr=16000.5", "--input sr=16000.5: the forward's 'sr' is an int; 16000.5 is not a whole number"),
    ("sr=abc", "--input sr=abc: the forward's 'sr' is an int; 'abc' is not a number"),
    ("sr=", "--input sr= has no value"),
    ("x=3", "--input x=...: 'x' is a tensor input of the forward"),
])
def test_input_values_are_checked_against_the_forward(run_cli, tmp_path, value, fragment):
    (tmp_path / "vad.py").write_text(VAD)
    code, _, err = run_cli("bench", f"{tmp_path / 'vad.py'}:Vad", "--input", value, "--iter", "2", "--warmup", "0")
    assert_one_line_error(code, err, fragment)
    assert "--input_dims" not in err


def test_compare_with_a_nan_input_is_refused_before_any_json_is_written(run_cli, tmp_path):
    (tmp_path / "vad.py").write_text(VAD)
    out = tmp_path / "out"
    code, _, err = run_cli("compare", f"{tmp_path / 'vad.py'}:Vad", "--plan", "quick", "--input", "sr=nan", "-o", out)
    assert_one_line_error(code, err, "--input sr=nan: nan is not a finite number")
    assert not out.exists()


def test_an_integral_value_binds_as_the_int_the_forward_declares_and_the_json_is_strict(run_cli, tmp_path):
    (tmp_path / "vad.py").write_text(VAD)
    report = tmp_path / "bench.json"
    code, out, err = run_cli("bench", f"{tmp_path / 'vad.py'}:Vad", "--input", "sr=16000.0", "--iter", "2",
                             "--warmup", "0", "--json", report)
    assert code == 0, err
    strict_json(report.read_text())


# -- item 6: frame sizes ------------------------------------------------------------------------------------------
def test_a_frame_size_beyond_the_limit_is_refused_up_front(run_cli):
    code, _, err = run_cli("bench", "zoo:conv_bn_relu", *TINY, "--frames", "nv21:100000x100000")
    assert_one_line_error(code, err, "--frames 'nv21:100000x100000': 100000x100000 is beyond the largest frame",
                          "16384 pixels a side")


# -- item 10: options that would be ignored are refused before any work ------------------------------------------
def test_arm64_cpu_without_verify_on_is_refused(run_cli, tmp_path):
    code, _, err = run_cli("compare", "zoo:conv_bn_relu", "--arm64-cpu", "cortex-a53", "-o", tmp_path / "out")
    assert_one_line_error(code, err, "--arm64-cpu", "--verify-on arm64")
    assert not (tmp_path / "out").exists()


def test_prune_steps_without_prune_is_refused(run_cli, tmp_path):
    code, _, err = run_cli("tune", "zoo:conv_bn_relu", *TINY, "--data", "sample-photos:4", "--min-cosine", "0.5",
                           "--prune-steps", "5", "-o", tmp_path / "out")
    assert_one_line_error(code, err, "--prune-steps caps the fine-tune of --prune, which is not given")


def test_prune_with_unlabelled_data_is_refused_before_the_search(run_cli, tmp_path):
    started = time.monotonic()
    code, _, err = run_cli("tune", "zoo:conv_bn_relu", *TINY, "--data", "sample-photos:4", "--min-cosine", "0.5",
                           "--prune", "-o", tmp_path / "out")
    assert_one_line_error(code, err, "--prune needs labelled samples, and --data sample-photos:4 has no labels")
    assert time.monotonic() - started < 60


def test_emit_app_for_arm64_without_an_arm64_root_is_refused_before_any_export(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("MOBILIZE_ARM64_ROOT", str(tmp_path / "no-root"))
    out = tmp_path / "out"
    code, _, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", "torchscript-fp32", *TINY, "--target", "arm64",
                           "--emit-app", tmp_path / "apps", "-o", out)
    assert_one_line_error(code, err, "--emit-app with --target arm64", "no arm64 root at")
    assert not out.exists() or not [p for p in out.iterdir() if p.suffix in (".pt", ".ptl")]


# -- item 11: messages -----------------------------------------------------------------------------------------
def test_verify_of_a_missing_file_says_so_first(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("MOBILIZE_ARM64_ROOT", str(tmp_path / "no-root"))
    code, _, err = run_cli("verify", tmp_path / "f" / "nope.onnx", "--on", "arm64")
    assert_one_line_error(code, err, f"model file not found: {tmp_path / 'f' / 'nope.onnx'}")


def test_the_printed_cmake_command_of_an_app_folder_with_spaces_and_quotes_is_shell_quoted(run_cli, tmp_path):
    apps = tmp_path / "my apps" / "it's \"here\""
    code, out, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", "torchscript-fp32", *TINY, "--no-verify",
                             "--emit-app", apps, "-o", tmp_path / "out")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("app "))
    words = shlex.split(line.split("): ", 1)[1])
    assert words[:3] == ["cmake", "-S", words[2]] and Path(words[2]).parent == apps, words
    assert words[4] == str(Path(words[2]) / "build"), words


# -- item 12: no temporary folder outlives an interrupted export -------------------------------------------------
def test_sigterm_during_an_onnx_export_leaves_no_temporary_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    proc = subprocess.Popen([sys.executable, "-c", FOREGROUND_SIGINT, "optimize", "zoo:conv_bn_relu", "--recipe",
                             "onnx-fp32", *TINY, "-o", tmp_path / "out"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(tmp.rglob("mobilize-onnx-*")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert list(tmp.rglob("mobilize-onnx-*")), "the export's temporary folder never appeared"
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    time.sleep(0.5)
    assert not list(tmp.rglob("mobilize-*")), list(tmp.rglob("*"))


def _boom_module():
    import torch

    class Boom(torch.nn.Module):
        def forward(self, x):
            if x.sum() > -1e9:
                raise RuntimeError("boom in scripted forward")
            return x

    return Boom()


def test_a_scripted_models_own_raise_is_shown_not_blamed_on_the_inputs(run_cli, tmp_path):
    """TorchScript prints its stacks first: the innermost raise's message ('builtins.RuntimeError: ...') is shown,
    and the hint points at the model's forward, not --input_dims."""
    path = tmp_path / "boom.pt"
    import torch

    torch.jit.script(_boom_module()).save(str(path))
    code, _, err = run_cli("bench", path, "--input_dims", "1,4", "--iter", "2")
    assert_one_line_error(code, err, "the model's own code raised on inputs [(1,4) float32]: boom in scripted forward")
    assert "--input_dims" not in err
