"""`mobilize bench` on every format: the speed_benchmark_torch lines and the JSON fields."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import INPUT_SHAPE

JSON_FIELDS = [
    "format", "runtime", "threads", "warmup", "iterations", "size_bytes", "load_ms", "first_run_ms",
    "latency_ms_mean", "latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "latency_ms_min",
    "latency_ms_max", "latency_ms_std", "iters_per_s", "peak_rss_mb", "input_source",
]
MAIN_LINE = re.compile(r"^Main run finished\. Microseconds per iter: ([0-9.]+)\. Iters per second: ([0-9.]+)$", re.M)
DIMS = ",".join(map(str, INPUT_SHAPE))


def check_report(path, fmt: str, runtime: str, iterations: int) -> dict:
    report = json.loads(path.read_text())
    missing = [f for f in JSON_FIELDS if f not in report]
    assert not missing, missing
    assert report["format"] == fmt and report["runtime"] == runtime
    assert report["iterations"] == iterations
    assert 0 < report["latency_ms_min"] <= report["latency_ms_p50"] <= report["latency_ms_p90"] <= report["latency_ms_max"]
    assert report["iters_per_s"] > 0 and report["peak_rss_mb"] > 0 and report["size_bytes"] > 0
    return report


def test_bench_zoo_model_prints_original_lines(run_cli, tmp_path):
    code, out, err = run_cli("bench", "zoo:conv_bn_relu", "--iter", "7", "--warmup", "2", "--threads", "1",
                             "--json", tmp_path / "r.json")
    assert code == 0, err
    for line in ("Starting benchmark.", "Running warmup runs.", "Main runs."):
        assert line in out.splitlines()
    us, per_s = map(float, MAIN_LINE.search(out).groups())
    assert us > 0 and abs(per_s - 1e6 / us) / per_s < 1e-3
    report = check_report(tmp_path / "r.json", "eager", "eager", 7)
    assert report["threads"] == 1 and report["warmup"] == 2
    assert report["input_source"] == "random-with-seed:0"


@pytest.mark.parametrize("fmt,runtime", [
    ("torchscript", "torchscript"), ("lite", "lite"), ("exported_program", "eager"),
    ("executorch", "executorch"), ("onnx", "onnxruntime"),
])
def test_bench_each_format(run_cli, artifacts, tmp_path, fmt, runtime):
    code, out, err = run_cli("bench", "--model", artifacts[fmt], "--input_dims", DIMS, "--iter", "5",
                             "--threads", "2", "--json", tmp_path / "r.json")
    assert code == 0, err
    assert MAIN_LINE.search(out)
    report = check_report(tmp_path / "r.json", fmt, runtime, 5)
    assert report["size_bytes"] == artifacts[fmt].stat().st_size


@pytest.mark.parametrize("fmt", ["executorch", "onnx", "exported_program"])
def test_input_shape_read_from_the_artifact(run_cli, artifacts, tmp_path, fmt):
    code, out, err = run_cli("bench", artifacts[fmt], "--iter", "3", "--json", tmp_path / "r.json")
    assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["input_specs"][0]["shape"] == list(INPUT_SHAPE)


@pytest.mark.parametrize("fmt", ["torchscript", "lite"])
def test_bundled_input(run_cli, artifacts, tmp_path, fmt):
    code, out, err = run_cli("bench", artifacts[fmt], "--use_bundled_input", "0", "--iter", "3",
                             "--print_output", "--json", tmp_path / "r.json")
    assert code == 0, err
    assert "Output 0: tensor(" in out
    assert json.loads((tmp_path / "r.json").read_text())["input_source"] == "bundled:0"


def test_kebab_case_flags_and_report_pep(run_cli):
    code, out, err = run_cli("bench", "zoo:conv_bn_relu", "--input-dims", "1,3,16,16", "--input-type", "float",
                             "--input-memory-format", "channels_last", "--iter", "4", "--warmup", "0",
                             "--report-pep", "--pthreadpool-size", "1")
    assert code == 0, err
    assert len(re.findall(r'^PyTorchObserver \{"type": "NET", "unit": "us", "metric": "latency"', out, re.M)) == 4


def test_no_inputs(run_cli, tmp_path):
    (tmp_path / "noin.py").write_text(
        "import torch\nclass Const(torch.nn.Module):\n    def forward(self):\n        return torch.ones(3) * 2\n")
    code, out, err = run_cli("bench", f"{tmp_path / 'noin.py'}:Const", "--no_inputs", "--iter", "3", "--print_output")
    assert code == 0, err
    assert "tensor([2., 2., 2.])" in out


def test_console_script_and_python_m(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "mobilize")
    for cmd in ([exe], [sys.executable, "-m", "mobilize"]):
        proc = subprocess.run(cmd + ["bench", "zoo:conv_bn_relu", "--input_dims", "1,3,8,8", "--iter", "2"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert MAIN_LINE.search(proc.stdout)
