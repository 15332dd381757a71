"""Issue #12: native aborts, interruptions, killed runs and stale files.  Each test runs the command
(or its equivalent on a tiny model) and checks the one-line message, the exit code and what is left
on disk.  Bad arguments and files are rows of tests/cli/test_bad_input.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mobilize.exporters.base import Exporter
from tests.conftest import assert_one_line_error

ROOT = Path(__file__).resolve().parents[2]
TINY = ("--input_dims", "1,3,16,16")


class AbortingExporter(Exporter):
    """Writes half a file, then aborts the process, as a crashing native exporter or runtime does."""

    name = "aborting"
    format = "onnx"
    suffix = ".onnx"

    def write(self, module, ctx, path: Path) -> None:
        path.write_bytes(b"half a file")
        os.abort()


def start(*args: str, **kw) -> subprocess.Popen:
    """The real command in its own process group, plain progress lines on stdout, Ctrl-C as in a terminal."""
    # tests.* plugins importable in the workers; src/ first, so the tree under test runs, not an installed copy
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    return subprocess.Popen([sys.executable, "-c", FOREGROUND_SIGINT, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True, **kw)


FOREGROUND_SIGINT = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'mobilize', *sys.argv[1:]])\n")
"""Exec mobilize with the SIGINT disposition a terminal's command has: a shell without job control starts
background commands with SIGINT ignored (`cmd &`, some CI runners), and Python then never raises
KeyboardInterrupt. (Not preexec_fn: it forces fork() in a process where JAX runs threads.)"""


def wait_for_line(proc: subprocess.Popen, fragment: str, timeout_s: float = 120) -> list[str]:
    """Read stdout until a line holds ``fragment``; returns the lines read."""
    lines = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if fragment in line:
            return lines
    proc.kill()
    raise AssertionError(f"no line with {fragment!r}; got {lines}; stderr: {proc.stderr.read()[-2000:]}")


def children(pid: int) -> list[int]:
    """Every descendant of ``pid``: compare forks its torch workers from a fork server, its own child."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, todo = [], [pid]
    while todo:
        of = todo.pop()
        mine = [p for p, parent in parents.items() if parent == of]
        found += mine
        todo += mine
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def all_dead(pids: list[int], timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


def dead_pid() -> int:
    """The id of a process that has exited (as a killed run's is)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# -- item 1: a native abort is one line, exit 2, and leaves no artifact -------------------------------
def test_native_abort_in_an_exporter_is_one_line_and_leaves_nothing(run_cli, tmp_path):
    recipe = tmp_path / "abort.yaml"
    recipe.write_text("exports: [torchscript, 'tests.cli.test_hardening:AbortingExporter']\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("the user's own file")
    code, _, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", recipe, *TINY, "-o", out)
    assert_one_line_error(code, err, "[export tests.cli.test_hardening:AbortingExporter]",
                          "the optimize process was killed by SIGABRT", "nothing was written")
    # the torchscript file built before the abort is not moved into place: the recipe did not succeed
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]


@pytest.mark.slow
def test_executorch_bundle_abort_is_one_line_and_leaves_nothing(run_cli_process, tmp_path):
    """The issue's own command: ExecuTorch's bundled-output check aborts on conv_bn_relu."""
    recipe = tmp_path / "etb.yaml"
    recipe.write_text("exports: [{executorch: {bundle: true, bundle_samples: 1}}]\npasses: [fuse]\n")
    out = tmp_path / "out"
    code, _, err = run_cli_process("optimize", "zoo:conv_bn_relu", "--recipe", recipe, "-o", out)
    if code == 0:
        pytest.skip("this ExecuTorch no longer aborts on the bundle check")
    assert_one_line_error(code, err, "[export executorch]", "killed by SIGABRT", "nothing was written")
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["optimize.log"]


# -- item 7: SIGTERM cleans up at once; SIGKILL leaves temporaries that the next run removes -------------
def test_sigterm_and_sigkill_during_optimize(tmp_path, run_cli):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".keep").write_text("the user's hidden file")
    recipe = tmp_path / "hang.yaml"
    recipe.write_text("passes: ['tests.compare_plugins:Hang']\nexports: [torchscript]\n")
    proc = start("optimize", "zoo:conv_bn_relu", "--recipe", recipe, *TINY, "-o", out)
    wait_for_line(proc, "pass tests.compare_plugins:Hang")
    workers = children(proc.pid)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and [ln for ln in err.splitlines() if ln.strip()] == ["mobilize: interrupted"], err
    assert all_dead(workers), "the child is stopped with its parent"
    assert sorted(p.name for p in out.iterdir()) == [".keep", "logs"], "no staging folder, no temporary"

    proc = start("optimize", "zoo:conv_bn_relu", "--recipe", recipe, *TINY, "-o", out)
    wait_for_line(proc, "pass tests.compare_plugins:Hang")
    stale = out / f".conv_bn_relu-old.mobilize-tmp-{dead_pid()}-x1y2.pte"  # what a killed writer leaves
    stale.write_bytes(b"")
    workers = children(proc.pid)
    staging = [p for p in out.iterdir() if p.name.startswith(f".mobilize-staging-{proc.pid}-")]
    assert staging and workers, (list(out.iterdir()), workers)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert all_dead(workers), "the child dies with its parent"
    assert staging[0].exists() and stale.exists()  # SIGKILL: nothing could clean up ...
    code, stdout, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", "torchscript-fp32", *TINY, "-o", out,
                                "--json", tmp_path / "result.json")
    assert code == 0, err
    # ... so the next run into the folder removes what dead runs left, and nothing else (the killed run's log stays)
    assert sorted(p.name for p in out.iterdir()) == [".keep", "conv_bn_relu-torchscript-fp32.pt",
                                                     "conv_bn_relu-torchscript-fp32.pt.manifest.json", "logs"]
    # the staging folder it built in does not show in what it leaves: the manifest names the final path
    manifest = json.loads((out / "conv_bn_relu-torchscript-fp32.pt.manifest.json").read_text())
    assert manifest["path"] == str(out / "conv_bn_relu-torchscript-fp32.pt")
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["artifacts"][0]["artifact"] == str(out / "conv_bn_relu-torchscript-fp32.pt")
    assert "staging" not in stdout + json.dumps(result)


def test_temp_names_carry_the_pid_and_stale_ones_are_removed(tmp_path):
    from mobilize.core.artifact import atomic_path
    from mobilize.core.paths import make_temp_dir, owner_pid, remove_stale

    with atomic_path(tmp_path / "m.pte") as tmp:
        assert owner_pid(tmp.name) == os.getpid() and tmp.name.startswith(".m.")
    gone = dead_pid()
    stale_dir = Path(tempfile.mkdtemp(prefix=f"mobilize-compare-{gone}-"))
    (stale_dir / "reference.pt").write_bytes(b"x" * 1000)
    live_dir = Path(tempfile.mkdtemp(prefix=f"mobilize-compare-{os.getppid()}-"))  # a live process's: kept
    fresh = make_temp_dir("compare")
    try:
        assert not stale_dir.exists() and live_dir.exists()
        assert owner_pid(fresh.name) == os.getpid()
        nested = tmp_path / "artifacts"
        nested.mkdir()
        (nested / f".v.mobilize-tmp-{gone}-ab.onnx").write_bytes(b"")
        (nested / "mobilize-notes.txt").write_text("not a temporary")
        assert [p.name for p in remove_stale(tmp_path)] == [f".v.mobilize-tmp-{gone}-ab.onnx"]
    finally:
        for d in (live_dir, fresh):
            shutil.rmtree(d, ignore_errors=True)


# -- items 6, 7 and 8: SIGTERM in a compare; a run owns its output folder ------------------------------
def test_sigterm_during_compare_marks_the_variant_and_cleans_up(tmp_path):
    out = tmp_path / "out"
    (out / "artifacts").mkdir(parents=True)
    (out / "logs").mkdir()
    (out / "report.json").write_text(json.dumps({"complete": True, "variants": [{"name": "torchscript-frozen"}]}))
    (out / "report.html").write_text("<html>old</html>")
    (out / "artifacts" / "torchscript-frozen.pt").write_bytes(b"old artifact")
    (out / "logs" / "torchscript-frozen-run.log").write_text("old log")
    (out / "mine.txt").write_text("the user's own file")
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: sigterm\nvariants:\n  - {name: hang, passes: ['tests.compare_plugins:Hang']}\n")
    proc = start("compare", "zoo:conv_bn_relu", "--plan", plan, *TINY, "--data", "sample-photos:4",
                 "--accuracy-samples", "2", "--iter", "2", "--rounds", "1", "--threads", "1", "-o", out)
    wait_for_line(proc, "hang: load and accuracy")
    time.sleep(0.5)
    workers = children(proc.pid)
    os.kill(proc.pid, signal.SIGTERM)  # what `timeout` and CI cancellation send: to mobilize only
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == [f"mobilize: interrupted; results so far are in {out / 'report.json'} and report.html"], err
    report = json.loads((out / "report.json").read_text())
    outcomes = {v["name"]: v["outcome"] for v in report["variants"]}
    assert report["complete"] is False and outcomes == {"hang": "INTERRUPTED"}, outcomes
    assert any("removed the previous run's report.json, report.html, artifacts/, logs/" in n for n in report["notes"])
    assert not (out / "artifacts" / "torchscript-frozen.pt").exists() and (out / "mine.txt").exists()
    assert all_dead(workers), "no worker outlives the run"
    assert not list(Path(tempfile.gettempdir()).glob(f"mobilize-compare-{proc.pid}-*")), "its temp folder is gone"


def test_sigint_before_the_first_step_points_at_no_report(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"complete": True, "variants": []}))  # an older run's
    proc = start("compare", "zoo:conv_bn_relu", "--plan", "quick", *TINY, "--accuracy-samples", "2", "-o", out)
    wait_for_line(proc, "[0/")
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert [ln for ln in err.splitlines() if ln.strip()] == ["mobilize: interrupted; nothing was measured yet"]
    assert not (out / "report.json").exists(), "the older run's report was this run's to replace"


# -- item 2: the float reference runs isolated and timed ----------------------------------------------
@pytest.mark.parametrize("code,timeout_s,fragments", [
    ("    def forward(self, x):\n        os.kill(os.getpid(), signal.SIGSEGV)\n", "120",
     ("the float reference failed", "SIGSEGV", "stage 'reference'")),
    ("    def __init__(self):\n        super().__init__()\n        time.sleep(3600)\n", "3",
     ("[build the model] the model check process gave no answer within 3 s",)),
])
def test_a_model_that_crashes_or_hangs_before_the_variants_is_one_line(run_cli, tmp_path, code, timeout_s, fragments):
    """compare builds a user's model and runs it first in isolated, timed stages, never in its own process."""
    model = tmp_path / "bad.py"
    model.write_text(f"import os, signal, time, torch\nclass Net(torch.nn.Module):\n{code}")
    out = tmp_path / "out"
    code, _, err = run_cli("compare", f"{model}:Net", "--plan", "quick", *TINY, "--timeout", timeout_s, "-o", out)
    assert_one_line_error(code, err, *fragments)
    if "float reference" in fragments[0]:  # the reference ran: its folder keeps the logs and a report of the failure
        report = json.loads((out / "report.json").read_text())
        assert report["reference_failure"]["stage"] == "reference" and (out / "logs").is_dir()
        assert f"kept {out / 'report.json'} (failed stage: reference)" in err
    else:
        assert not out.exists(), "a failed run removes the folder it created"


def test_debug_shows_where_the_float_reference_failed_in_its_worker(run_cli, tmp_path):
    """The reference runs in a worker: without --debug one line, with it the worker's own traceback (it was the
    parent's alone, which ends at the message it received)."""
    model = tmp_path / "bad.py"
    model.write_text("import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
                     "        raise ValueError('planted in forward')\n")
    code, _, err = run_cli("compare", f"{model}:Net", "--plan", "quick", *TINY, "-o", tmp_path / "o")
    assert_one_line_error(code, err, "the float reference failed", "planted in forward")
    code, _, err = run_cli("compare", f"{model}:Net", "--plan", "quick", *TINY, "-o", tmp_path / "p", "--debug")
    assert code == 2 and "In the child process:" in err and f'File "{model}", line 4, in forward' in err, err[-3000:]


# -- item 4: no raw torch tracebacks from a damaged .pt2 ----------------------------------------------
def test_damaged_pt2_is_one_line_without_torch_log(tmp_path):
    """A whole zip that still is no readable program: torch.export.load logs the reason with its traceback
    (13 lines on stderr), then raises "see the warnings above".  The user gets the reason, in one line."""
    import zipfile

    damaged = tmp_path / "damaged.pt2"
    with zipfile.ZipFile(damaged, "w") as dst:
        dst.writestr("a/archive_format", b"pt2")
        dst.writestr("b/other", b"1")
    proc = start("bench", damaged, "--iter", "1")
    _, err = proc.communicate(timeout=120)
    assert_one_line_error(proc.returncode, err, "not a valid ExportedProgram (.pt2)", 'hasRecord("version")')
    assert "warnings above" not in err
