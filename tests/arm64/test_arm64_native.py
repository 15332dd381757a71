"""The native benchmark and an emitted app cross-compiled for aarch64 (g++-aarch64-linux-gnu against the arm64
root's wheels) and run in the arm64 root under QEMU: run with ``pytest -m arm64 tests/arm64``.

Each asserts that the program that ran is an AArch64 ELF (e_machine 183), that inside the root it saw an
``aarch64`` machine while this host is x86_64 (so it ran under emulation), and that its outputs are the
host's to float rounding, so a host binary relabelled, or a run that computed nothing, fails.  The aarch64
benchmarks are cached like the host's (``~/.cache/mobilize/native``: ~35 s for ExecuTorch, ~75 s for LibTorch
the first time on 2 loaded cores, then instant); the app is built each time (~40 s).
"""

from __future__ import annotations

import json
import platform
import re
import shutil

import pytest
import torch

from mobilize.arm64.run import missing

pytestmark = [pytest.mark.arm64, pytest.mark.skipif(missing() is not None, reason=f"arm64: {missing()}"),
              pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None,
                                 reason="no aarch64-linux-gnu-g++ (scripts/setup-arm64.sh installs it)")]

MAIN_LINE = re.compile(r"^Main run finished\. Microseconds per iter: [0-9.]+\. Iters per second: [0-9.]+  "
                       r"\[emulated: QEMU cortex-a76 on x86_64, not latency\]$", re.M)


@pytest.fixture(scope="module")
def files(built) -> dict:
    """The tiny test model as an ExecuTorch .pte and a lite-interpreter .ptl (the session's arm64 files)."""
    return {"executorch": built["executorch-fp32"], "lite": built["lite-fp32"]}


def _host_outputs(path, inputs) -> list[torch.Tensor]:
    from mobilize.core.artifact import Artifact
    from mobilize.runtimes.base import runtime_for

    artifact = Artifact.from_file(path)
    session = runtime_for(artifact.format).load(artifact)
    try:
        return [torch.as_tensor(t).float() for t in session.run(inputs)]
    finally:
        session.close()


@pytest.mark.parametrize("fmt", ["executorch", "lite"])
def test_native_benchmark_built_for_aarch64_runs_under_qemu(files, fmt, run_cli, tmp_path):
    from mobilize.arm64.native import bench_native_arm64
    from mobilize.bench.harness import BenchConfig
    from mobilize.native.cross import elf_machine
    from mobilize.core.inputs import make_random_inputs

    report = bench_native_arm64(str(files[fmt]), BenchConfig(warmup=1, iterations=3, threads=1),
                                echo=lambda line: None)
    assert elf_machine(report["native"]["binary"]) == 183  # AArch64
    arm = report["arm64"]
    assert arm["machine"] == "aarch64" and platform.machine() == arm["host_machine"] == "x86_64"
    assert arm["emulated"] and arm["qemu_cpu"] == "cortex-a76"
    assert not [k for k in report if "latency" in k and "not_latency" not in k], "emulated times shown as latency"
    assert 0 < arm["ms_per_iter_not_latency"]["min"] <= arm["ms_per_iter_not_latency"]["max"]
    # the aarch64 kernels computed the host's answer (random-with-seed:0 input, as the host harness picks it)
    [spec] = [s for s in report["input_specs"]]
    from mobilize.core.inputs import InputSpec

    expected = _host_outputs(files[fmt], make_random_inputs([InputSpec(tuple(spec["shape"]))], 0))
    assert len(report["_outputs"]) == len(expected) > 0
    for got, want in zip(report["_outputs"], expected):
        torch.testing.assert_close(got.float(), want, atol=1e-4, rtol=1e-4)


def test_bench_cli_labels_the_emulated_summary_line(files, run_cli, tmp_path):
    code, out, err = run_cli("bench", files["executorch"], "--native", "--on", "arm64", "--iter", "3", "--warmup", "1",
                             "--json", tmp_path / "b.json")
    assert code == 0, err
    assert MAIN_LINE.search(out), out
    assert "emulated, so these times are not latency" in out and "latency ms" not in out
    report = json.loads((tmp_path / "b.json").read_text())
    assert report["on"] == "arm64" and report["arm64"]["machine"] == "aarch64"
    assert "latency_ms_p50" not in report


def test_bench_on_arm64_needs_native(files, run_cli):
    code, out, err = run_cli("bench", files["executorch"], "--on", "arm64")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "add --native" in err


def test_emitted_app_built_for_aarch64_prints_top5_and_summary(files, tmp_path, capsys):
    import numpy as np

    from mobilize.arm64.native import apps_on_arm64
    from mobilize.core.artifact import Format
    from mobilize.native.app import emit_app
    from mobilize.native.cross import elf_machine
    from mobilize.core.inputs import InputSpec
    from tests.conftest import INPUT_SHAPE

    app = emit_app(files["executorch"], Format("executorch"), tmp_path / "app", InputSpec(INPUT_SHAPE))
    lines: list[str] = []
    runs, notes = apps_on_arm64([app], echo=lines.append)
    assert not notes and len(runs) == 1, notes
    run = runs[0]
    assert elf_machine(run["binary"]) == 183 and run["machine"] == "aarch64" and run["emulated"]
    text = "\n".join(run["lines"])
    assert len(re.findall(r"^  #[1-5]  class \d+  score -?[0-9.]+$", text, re.M)) == 5, text
    assert re.search(r"^emulated time: [0-9.]+ ms \(median of 20 runs\)  \[emulated: QEMU cortex-a76 on x86_64, "
                     r"not latency\]$", text, re.M), text
    assert "latency:" not in text
    # its top-1 is the host runtime's (within float rounding of the best score) on the app's own input.raw
    x = torch.from_numpy(np.fromfile(app.folder / "input.raw", dtype=np.float32).reshape(INPUT_SHAPE))
    scores = _host_outputs(files["executorch"], [x])[0].flatten()
    assert scores[run["top1"]] >= scores.max() - 1e-4
    assert (app.folder / "toolchain-aarch64.cmake").is_file() and "aarch64" in (app.folder / "README.md").read_text()
