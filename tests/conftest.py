"""Shared fixtures: one small model and an artifact of it in every format, made once per session."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import pytest
import torch

from mobilize.cli.main import main as cli_main

pytest_plugins = ["tests.arm64.arm64_files", "tests.decoder_files"]
"""The arm64 tests' session fixture (``built``); a plugin module, not a second conftest.py (see its docstring)."""

INPUT_SHAPE = (1, 3, 32, 32)

NO_RACE = ("--time-budget", "1")
"""compare options for a test of verdicts and reports, not of the race: the timed rounds stop after ``--rounds``
(min rounds always run) instead of racing near-equal variants for compare's default 30 s budget.  The race itself
is tests/compare/test_racing.py's."""

BENCH_JSON_FIELDS = [
    "format", "runtime", "threads", "warmup", "iterations", "size_bytes", "load_ms", "first_run_ms",
    "latency_ms_mean", "latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "latency_ms_min",
    "latency_ms_max", "latency_ms_std", "iters_per_s", "peak_rss_mb", "input_source",
]
"""Fields every ``mobilize bench --json`` report has, whatever the runtime."""


KEPT_OFF = re.compile(r"note: \d+ line\(s\) written to stderr in a library's log format .* were kept off the "
                      r"terminal: they are in \S+")


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    """A user error: exit 2, one line on stderr starting ``mobilize: error:``, no traceback."""
    assert code == 2
    # the one other line a failed command may print: where a runtime's log lines kept off the terminal went
    lines = [ln for ln in err.splitlines() if ln.strip() and not KEPT_OFF.fullmatch(ln)]
    assert len(lines) == 1, err
    assert lines[0].startswith("mobilize: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


class TinyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return TinyNet().eval()


def tiny_input() -> torch.Tensor:
    return torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="session", autouse=True)
def _temp_files_of_this_run():
    """Every temporary file of the run - the CLI's kept-off-the-terminal stderr logs (``mobilize-stderr-*.log``),
    the runtimes' own - goes in one short-named folder per pytest process, removed at its end, instead of piling up
    in /tmp.  Set in the environment, so the commands and workers the tests start use it too (their checks that
    nothing is left look in ``tempfile.gettempdir()``: the same folder).  Short: Unix socket paths under it (the fork
    servers', Ray's) must stay within 107 bytes."""
    import shutil
    import tempfile

    system = tempfile.gettempdir()
    folder = tempfile.mkdtemp(prefix="mobilize-tests-", dir=system)
    os.chmod(folder, os.stat(system).st_mode & 0o7777)  # as reachable as the system's (a test drops to another user)
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = tempfile.tempdir = folder
    yield folder
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None
    # removed at exit, after multiprocessing's own finalizers (its fork servers' socket folders are in it; theirs run
    # at exit priority -100, and a folder gone before them is a traceback at the end of the run)
    from multiprocessing import util

    util.Finalize(None, shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True}, exitpriority=-101)


def once_per_run(tmp_path_factory, name: str, make):
    """``make(folder)`` once per test run: (its JSON-able result, the folder), shared by every pytest-xdist worker
    (a session fixture runs once per worker otherwise; the heavy ones are real compare runs and exports).  Users
    of the folder read it, never write to it."""
    import json

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = root / f"shared-{name}", root / f"shared-{name}.json"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not done.exists():
            folder.mkdir(exist_ok=True)
            done.write_text(json.dumps(make(folder)))
    return json.loads(done.read_text()), folder


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    """A TinyNet artifact per format: torchscript (.pt, with a bundled input), lite (.ptl),
    exported program (.pt2), executorch (.pte, XNNPACK), onnx (.onnx), tflite (.tflite, mobilize's litert exporter)."""
    made, _ = once_per_run(tmp_path_factory, "artifacts", lambda out: {k: str(v) for k, v in _artifacts(out).items()})
    return {k: Path(v) for k, v in made.items()}


def _artifacts(out: Path) -> dict[str, Path]:
    from torch.utils.bundled_inputs import augment_model_with_bundled_inputs, bundle_large_tensor

    model, x = tiny_model(), tiny_input()
    scripted = torch.jit.script(model)
    augment_model_with_bundled_inputs(scripted, [(bundle_large_tensor(x),)])
    paths = {"torchscript": out / "tiny.pt", "lite": out / "tiny.ptl", "exported_program": out / "tiny.pt2",
             "executorch": out / "tiny.pte", "onnx": out / "tiny.onnx"}
    scripted.save(str(paths["torchscript"]))
    scripted._save_for_lite_interpreter(str(paths["lite"]))
    program = torch.export.export(model, (x,))
    torch.export.save(program, str(paths["exported_program"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        pte = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
        paths["executorch"].write_bytes(pte.buffer)
        torch.onnx.export(model, (x,), str(paths["onnx"]), dynamo=False, input_names=["input"])
    from mobilize.core.context import Context
    from mobilize.exporters import EXPORTERS
    from mobilize.core.inputs import InputSpec

    paths["tflite"] = EXPORTERS.get("litert")().export(model, Context(input_specs=[InputSpec(INPUT_SHAPE)]),
                                                       out / "tiny").path
    return paths


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()  # drop what fixtures printed
        code = cli_main([str(a) for a in argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture
def run_cli_process():
    """Run the real ``mobilize`` command in a subprocess; returns (exit code, stdout, stderr).

    Used where native libraries write to the process's stderr (ExecuTorch), which in-process
    capture cannot attribute to a single call."""
    import os
    import subprocess
    import sys

    exe = os.path.join(os.path.dirname(sys.executable), "mobilize")

    def run(*argv: str) -> tuple[int, str, str]:
        proc = subprocess.run([exe, *map(str, argv)], capture_output=True, text=True, timeout=300)
        return proc.returncode, proc.stdout, proc.stderr

    return run


# -- one real compare run of misbehaving variants, shared by the compare and report tests ------------------
MISBEHAVING_PLAN = """
name: misbehaving
variants:
  - {name: eager-fp32}
  - {name: crash, passes: ["tests.compare_plugins:AbortOnRun"]}
  - {name: hang, passes: ["tests.compare_plugins:Hang"]}
  - {name: raise, exports: ["tests.compare_plugins:BrokenExporter"]}
  - {name: wrong, passes: ["tests.compare_plugins:Perturb"]}
  - {name: fused, passes: [fuse]}
"""


@pytest.fixture(scope="session")
def misbehaving_run(tmp_path_factory):
    def make(tmp: Path) -> int:
        from mobilize.cli.main import main

        (tmp / "plan.yaml").write_text(MISBEHAVING_PLAN)
        return main(["compare", "zoo:toy_classifier", "--plan", str(tmp / "plan.yaml"), "--input_dims", "1,3,32,32",
                     "--data", "sample-photos:6", "--accuracy-samples", "4", "--iter", "6", "--rounds", "2",
                     "--threads", "1", "--timeout", "20", "-o", str(tmp / "out")])

    code, folder = once_per_run(tmp_path_factory, "misbehaving", make)
    return code, folder / "out"



@pytest.fixture(scope="session")
def misbehaving_report(misbehaving_run) -> dict:
    import json

    return json.loads((misbehaving_run[1] / "report.json").read_text())
