"""`mobilize sweep`: the index, resume, crashes as outcomes, fingerprints never divided; real sweeps
(local and on a Ray cluster started here, with a worker killed mid-sweep) are marked slow."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import importlib
from mobilize.compare.config import CompareConfig
from mobilize.core.errors import UserError
from mobilize.cli.main import main as cli_main
from mobilize.sweep import ModelJob, SweepConfig, sweep
from mobilize.sweep.fingerprint import FingerprintMismatch, host_fingerprint, latency_ratio
from mobilize.sweep.jobs import ModelEntry, parse_models_text

MODELS_TEXT = """\
zoo:conv_bn_relu --variant eager-fp32 --variant torchscript-frozen
zoo:toy_classifier --input_dims 1,3,32,32 --variant eager-fp32 --variant fused
zoo:digits_mobilenet_v2 --variant eager-fp32 --variant torchscript-frozen   # trained, 96x96
"""
SMALL = ["--plan", "quick", "--iter", "4", "--rounds", "1", "--accuracy-samples", "8"]
FAST = SweepConfig(compare=CompareConfig(iterations=4, rounds=1, accuracy_samples=8))


class FakeCompare:
    """Stands in for mobilize.compare.entry.compare (what sweep calls): records calls; a model can raise or interrupt."""

    def __init__(self, crash: str = "", interrupt: str = ""):
        self.calls: list[str] = []
        self.crash, self.interrupt = crash, interrupt

    def __call__(self, model, plan, config, progress=None):
        self.calls.append(model)
        if model == self.interrupt:
            raise KeyboardInterrupt
        if model == self.crash:
            # what compare raises when a model's worker dies (a raw exception escaping compare is a bug, exit 1)
            raise UserError("[run] the compare worker was killed by SIGSEGV (a crash in native code)")
        names = [v.name for v in plan.variants]
        variants = [{"name": n, "outcome": "OK" if i < 2 else "EXPORT_FAIL",
                     "speedup": {"ratio": 1.0 + i, "low": 0.9 + i, "high": 1.1 + i, "significant": i > 0},
                     "accuracy": {"top1_drop": 0.5 * i, "cosine": 1.0}} for i, n in enumerate(names)]
        return {"complete": True, "variants": variants,
                "recommended": {"name": names[min(1, len(names) - 1)], "reason": "fastest", "tied": []}}


@pytest.fixture
def fake(monkeypatch):
    def make(**kw):
        f = FakeCompare(**kw)
        # by module path: the package attribute mobilize.compare is the public compare() function
        monkeypatch.setattr(importlib.import_module("mobilize.compare.entry"), "compare", f)
        return f
    return make


def test_index_has_each_models_summary_and_link(fake, tmp_path):
    f = fake()
    jobs = parse_models_text(MODELS_TEXT)
    index = sweep(jobs, "quick", SweepConfig(out_dir=str(tmp_path), compare=CompareConfig(iterations=4, rounds=1)))
    assert f.calls == ["zoo:conv_bn_relu", "zoo:toy_classifier", "zoo:digits_mobilenet_v2"]
    rows = {m["stem"]: m for m in index["models"]}
    assert set(rows) == {"conv_bn_relu", "toy_classifier", "digits_mobilenet_v2"}
    toy = rows["toy_classifier"]
    assert toy["status"] == "DONE" and toy["recommended"]["name"] == "fused"
    assert toy["speedup"]["ratio"] == 2.0 and toy["top1_drop"] == 0.5
    assert toy["outcome_counts"] == {"OK": 2} and toy["report"] == "toy_classifier/report.html"
    assert toy["job"]["input_dims"] == "1,3,32,32"
    assert toy["fingerprint"] == host_fingerprint(None)
    on_disk = json.loads((tmp_path / "index.json").read_text())
    assert on_disk["complete"] and on_disk["status_counts"] == {"DONE": 3}
    html = (tmp_path / "index.html").read_text()
    assert "href='toy_classifier/report.html'" in html and "2.00x" in html
    assert all((tmp_path / s / "sweep.json").is_file() for s in rows)


def test_a_model_that_crashes_is_an_outcome_not_a_failed_sweep(fake, tmp_path, capsys):
    fake(crash="zoo:toy_classifier")
    code = cli_main(["sweep", "zoo:conv_bn_relu", "zoo:toy_classifier", "zoo:tiny", *SMALL, "-o", str(tmp_path)])
    assert code == 0
    rows = {m["stem"]: m for m in json.loads((tmp_path / "index.json").read_text())["models"]}
    assert rows["toy_classifier"]["status"] == "FAILED"
    assert "killed by SIGSEGV" in rows["toy_classifier"]["error"]
    assert rows["conv_bn_relu"]["status"] == rows["tiny"]["status"] == "DONE"
    out = capsys.readouterr().out
    assert "1 FAILED" in out and "2 DONE" in out and "index.html" in out
    assert "models 2/3 done, 0 running, 1 failed · toy_classifier: FAILED" in out  # progress across the sweep
    assert "models 3/3 done, 0 running, 1 failed · tiny: DONE" in out


def test_resume_after_an_interrupted_sweep_redoes_only_what_was_missing(fake, tmp_path, capsys):
    jobs = parse_models_text(MODELS_TEXT)
    cfg = SweepConfig(out_dir=str(tmp_path), compare=CompareConfig(iterations=4, rounds=1))
    fake(interrupt="zoo:toy_classifier")
    with pytest.raises(KeyboardInterrupt):
        sweep(jobs, "quick", cfg)
    cut = {m["stem"]: m["status"] for m in json.loads((tmp_path / "index.json").read_text())["models"]}
    assert cut == {"conv_bn_relu": "DONE", "toy_classifier": "INTERRUPTED", "digits_mobilenet_v2": "PENDING"}
    again = fake()
    index = sweep(jobs, "quick", SweepConfig(out_dir=str(tmp_path), resume=True, compare=CompareConfig(iterations=4, rounds=1)))
    assert again.calls == ["zoo:toy_classifier", "zoo:digits_mobilenet_v2"]
    assert index["complete"] and index["status_counts"] == {"DONE": 3}
    # a different setting is a different key: that model runs again
    third = fake()
    sweep(jobs[:1], "quick", SweepConfig(out_dir=str(tmp_path), resume=True, compare=CompareConfig(iterations=8, rounds=1)))
    assert third.calls == ["zoo:conv_bn_relu"]


def test_resume_does_not_reuse_a_result_from_another_fingerprint(fake, tmp_path):
    fake()
    jobs = [ModelJob("zoo:conv_bn_relu")]
    sweep(jobs, "quick", SweepConfig(out_dir=str(tmp_path)))
    saved = tmp_path / "conv_bn_relu" / "sweep.json"
    data = json.loads(saved.read_text())
    data["fingerprint"]["cpu_model"] = "Another CPU"
    saved.write_text(json.dumps(data))
    again = fake()
    sweep(jobs, "quick", SweepConfig(out_dir=str(tmp_path), resume=True))
    assert again.calls == ["zoo:conv_bn_relu"]


def test_latencies_from_two_fingerprints_are_never_divided(fake, tmp_path):
    fp = host_fingerprint(2)
    other = {**fp, "cpu_flags": [f for f in fp["cpu_flags"] if f != "avx2"] + ["not-" + "avx2"]}
    assert latency_ratio(10.0, 5.0, fp, dict(fp)) == 2.0
    with pytest.raises(FingerprintMismatch):
        latency_ratio(10.0, 5.0, fp, other)
    with pytest.raises(FingerprintMismatch):
        latency_ratio(10.0, 5.0, fp, {**fp, "threads": 1})
    # two fabricated results of one model on different machines: grouped apart, no ratio between them
    from mobilize.sweep.index import index_json, write_index

    a = ModelEntry("zoo:m", "m", {}, "k", fingerprint=fp, speedup={"ratio": 1.5, "significant": True})
    b = ModelEntry("zoo:m", "m-2", {}, "k", fingerprint=other, speedup={"ratio": 3.0, "significant": True})
    write_index([a, b], {"plan": "quick"}, tmp_path)
    data = index_json([a, b], {"plan": "quick"})
    assert len(data["fingerprints"]) == 2
    assert [m["speedup"]["ratio"] for m in data["models"]] == [1.5, 3.0]  # each its own, nothing derived
    assert (tmp_path / "index.html").read_text().count("<h2>machine") == 2


def test_bad_models_file_and_executor_are_one_line_errors(tmp_path, capsys):
    from tests.conftest import assert_one_line_error

    bad = tmp_path / "models.txt"
    bad.write_text("zoo:conv_bn_relu --speed fast\n")
    code = cli_main(["sweep", "--models", str(bad), "-o", str(tmp_path / "o")])
    assert_one_line_error(code, capsys.readouterr().err, "unknown option")
    code = cli_main(["sweep", "zoo:conv_bn_relu", "--executor", "dask", "-o", str(tmp_path / "o")])
    assert_one_line_error(code, capsys.readouterr().err, "unknown executor 'dask'")
    code = cli_main(["sweep", "-o", str(tmp_path / "o")])
    assert_one_line_error(code, capsys.readouterr().err, "no models to sweep")


def test_ray_executor_without_ray_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    from tests.conftest import assert_one_line_error

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    code = cli_main(["sweep", "zoo:conv_bn_relu", "--executor", "ray", "-o", str(tmp_path)])
    assert_one_line_error(code, capsys.readouterr().err, "the ray executor needs Ray", "pip install")


# -- real sweeps --------------------------------------------------------------------------------------------------

def _outcomes(index_path: Path) -> dict[str, tuple]:
    data = json.loads(index_path.read_text())
    return {m["stem"]: (m["status"], tuple(sorted(m["outcome_counts"].items()))) for m in data["models"]}


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    models = out / "models.txt"
    models.write_text(MODELS_TEXT)
    code = cli_main(["sweep", "--models", str(models), *SMALL, "-o", str(out / "sweep")])
    return code, out / "sweep"


@pytest.mark.slow
def test_local_sweep_of_three_zoo_models(local_sweep):
    code, out = local_sweep
    assert code == 0
    got = _outcomes(out / "index.json")
    assert got == {"conv_bn_relu": ("DONE", (("OK", 2),)), "toy_classifier": ("DONE", (("VACUOUS", 2),)),  # random init: constant logits
                   "digits_mobilenet_v2": ("DONE", (("OK", 2),))}
    for stem in got:
        assert json.loads((out / stem / "report.json").read_text())["complete"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_cluster():
    """A head (scheduling only) plus one worker node with 2 CPUs and the one bench slot, on 127.0.0.1, each a
    ``ray start --block`` process of this test; returns the address, their pids and a stop function."""
    import tempfile

    import psutil

    ray_bin = str(Path(sys.executable).with_name("ray"))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    temp = tempfile.mkdtemp(prefix="mray-", dir="/tmp")  # short: Ray's socket paths live under it
    address = f"127.0.0.1:{_free_port()}"
    common = ["--block", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    procs = [subprocess.Popen([ray_bin, "start", "--head", "--port", address.split(":")[1], "--temp-dir", temp,
                               "--num-cpus", "0", "--include-dashboard", "false", *common], **quiet)]

    def stop() -> None:
        tree = [c for p in procs for c in _descendants(p.pid)]
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        for p in tree:  # anything of this cluster still alive
            try:
                p.kill()
            except psutil.Error:
                pass
        shutil.rmtree(temp, ignore_errors=True)

    try:
        sockets = Path(temp) / "session_latest" / "sockets"
        _wait_for(lambda: (sockets / "raylet").exists(), 120)
        procs.append(subprocess.Popen([ray_bin, "start", "--address", address, "--num-cpus", "2",
                                       "--resources", '{"mobilize_bench": 1}', *common], **quiet))
        _wait_for(lambda: "mobilize_bench" in subprocess.run([ray_bin, "status", "--address", address],
                                                             capture_output=True, text=True, env=env).stdout, 180)
    except BaseException:
        stop()
        raise
    return address, [p.pid for p in procs], stop


def _descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _wait_for(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the Ray cluster did not come up")
        time.sleep(0.5)


def _kill_first_model_task(cluster: list[int], stop: threading.Event, killed: list[int]) -> None:
    """SIGKILL the Ray worker process (of our cluster) running the first model, once, 8 s into its compare."""
    import psutil

    seen = None
    while not stop.is_set() and not killed:
        for p in psutil.process_iter(["pid", "cmdline"]):
            if not " ".join(p.info["cmdline"] or []).startswith("ray::mobilize_sweep_model") or \
                    p.info["pid"] not in {c.pid for pid in cluster for c in _descendants(pid)}:
                continue
            if seen is None:
                seen = (p.info["pid"], time.monotonic())
            elif seen[0] == p.info["pid"] and time.monotonic() - seen[1] > 8:
                os.kill(p.info["pid"], signal.SIGKILL)
                killed.append(p.info["pid"])
            break
        time.sleep(0.5)


@pytest.mark.slow
def test_ray_sweep_same_outcomes_and_a_killed_worker_is_retried(local_sweep, tmp_path, capsys):
    pytest.importorskip("ray")
    pytest.importorskip("psutil")
    if shutil.which("ray", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("the ray command is not installed next to this Python")
    address, cluster, stop_cluster = _ray_cluster()
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_first_model_task, args=(cluster, stop, killed), daemon=True)
    killer.start()
    try:
        models = tmp_path / "models.txt"
        models.write_text(MODELS_TEXT)
        code = cli_main(["sweep", "--models", str(models), *SMALL, "--executor", f"ray:{address}",
                         "-o", str(tmp_path / "sweep")])
    finally:
        stop.set()
        killer.join(5)
        stop_cluster()
    assert code == 0
    assert killed, "the test never saw a Ray worker process running a model"
    _, local_out = local_sweep
    assert _outcomes(tmp_path / "sweep" / "index.json") == _outcomes(local_out / "index.json")
    data = json.loads((tmp_path / "sweep" / "index.json").read_text())
    retried = [m for m in data["models"] if m["retries"]]
    assert len(retried) == 1 and retried[0]["attempts"] == 2
    assert f"pid {killed[0]}" in retried[0]["retries"][0]
    for m in data["models"]:
        manifest = json.loads((tmp_path / "sweep" / m["stem"] / "files.json").read_text())
        assert "report.json" in manifest
        assert "mobilize-sweep-" not in (tmp_path / "sweep" / m["stem"] / "report.json").read_text()  # no worker paths


@pytest.mark.slow
def test_real_resume_redoes_only_the_missing_model(tmp_path):
    """Interrupt a real local sweep after its first model; --resume runs only the second."""
    out = tmp_path / "sweep"
    args = ["sweep", "zoo:conv_bn_relu", "zoo:toy_classifier", "--input_dims", "1,3,32,32", "--variant",
            "eager-fp32", *SMALL, "-o", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "mobilize", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if "toy_classifier: started" in line:
            proc.send_signal(signal.SIGTERM)
            break
    proc.communicate(timeout=120)
    first = _outcomes(out / "index.json")
    assert first["conv_bn_relu"][0] == "DONE" and first["toy_classifier"][0] != "DONE"
    before = (out / "conv_bn_relu" / "sweep.json").read_text()
    done = subprocess.run([sys.executable, "-m", "mobilize", *args, "--resume"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "1 model(s) already have a result, 1 to run" in done.stdout
    assert (out / "conv_bn_relu" / "sweep.json").read_text() == before
    assert _outcomes(out / "index.json")["toy_classifier"][0] == "DONE"


def test_the_sweep_config_holds_a_compare_config_and_round_trips_through_json():
    from mobilize.accuracy.verify import Policy

    cfg = SweepConfig(out_dir="o", executor="ray", compare=CompareConfig(data="digits:test", threads=2, rounds=3,
                                                                         policy=Policy(max_drop_points=0.5)))
    assert SweepConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
    assert cfg.settings() == {"iterations": 50, "rounds": 3, "accuracy_samples": 1000, "target": "host", "threads": 2}
