"""A device over real SSH (issue #64): Debian's sshd on 127.0.0.1 (tests/devices/loopback.py), logging into this
machine as this user, with this checkout's .venv Python as the device's Python and its cache folder in a temp folder.
What it shows: compare --on checks and times every file on the device with its own section and pick, beside the
host's in one table; a second run pushes nothing; a sshd killed during the device's rounds gives those variants an
outcome naming the lost connection while the host's stand; Ctrl-C leaves nothing running on the device; an
unreachable device or a bad address is one line and exit 2 before any work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error
from tests.devices.loopback import MISSING, LoopbackSshd, free_port

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
MOBILIZE = os.path.join(os.path.dirname(sys.executable), "mobilize")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    with LoopbackSshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture
def lo(sshd, tmp_path, monkeypatch):
    """A devices file naming the loopback device ``lo`` (its cache folder in this test's temp folder)."""
    monkeypatch.setenv("MOBILIZE_DEVICES", str(tmp_path / "devices.json"))
    cache = tmp_path / "device-cache"
    code = subprocess.run([MOBILIZE, "devices", "add", "lo", sshd.url, "--ssh-config", str(sshd.config),
                           "--python", sys.executable, "--cache", str(cache)], capture_output=True, text=True)
    assert code.returncode == 0, code.stderr
    return cache


def _compare(tmp_path, *args: str, out: str = "out") -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([MOBILIZE, "compare", "zoo:conv_bn_relu", "--rounds", "3",
                           "--time-budget", "1", "-o", str(tmp_path / out), *args], capture_output=True, text=True,
                          timeout=600)
    report = json.loads((tmp_path / out / "report.json").read_text())
    return proc, report


def test_devices_add_list_check_and_bad_input(lo, sshd, tmp_path):
    listed = subprocess.run([MOBILIZE, "devices", "list"], capture_output=True, text=True)
    assert listed.stdout.startswith(f"lo  {sshd.url}")
    checked = subprocess.run([MOBILIZE, "devices", "check", "lo"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    arch = os.uname().machine
    assert checked.stdout.startswith(f"lo ({sshd.url}): {arch}, ") and "Python 3." in checked.stdout
    assert "torch yes" in checked.stdout and "onnxruntime yes" in checked.stdout
    for argv, fragment in ((["add", "host", sshd.url], "'host' cannot name a device"),
                           (["add", "x", "http://example"], "is not a device address"),
                           (["check", "nosuch"], "unknown device 'nosuch'")):
        bad = subprocess.run([MOBILIZE, "devices", *argv], capture_output=True, text=True)
        assert_one_line_error(bad.returncode, bad.stderr, fragment)


def test_unreachable_device_is_one_line_before_any_work(tmp_path):
    port = free_port()  # nothing listens there
    proc = subprocess.run([MOBILIZE, "compare", "zoo:conv_bn_relu", "--on", f"ssh://nobody@127.0.0.1:{port}",
                           "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert_one_line_error(proc.returncode, proc.stderr, "the connection was lost or refused")
    assert not (tmp_path / "out").exists()


def test_compare_on_host_and_device_one_table_one_pick_each(lo, tmp_path):
    proc, report = _compare(tmp_path, "--variant", "onnx-fp32", "--variant", "torchscript-frozen", "--on", "host",
                            "--on", "lo")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dev = report["devices"]["lo"]
    assert dev["facts"]["machine"] == os.uname().machine and dev["emulated"] is None
    files = {v["name"]: v for v in report["variants"] if v.get("artifact")}
    assert set(files) == {"onnx-fp32", "torchscript-frozen"}
    for name, v in files.items():
        row = dev["variants"][name]
        assert row["outcome"] == v["outcome"] == "OK", row
        assert row["verdict"]["rule"] and row["latency"]["latency_ms_p50"] > 0
        assert len(row["latency_ms_round_medians"]) == 3  # the host's --rounds, on the device
    assert dev["recommended"]["name"] in files and "[rule " in dev["recommended"]["reason"]
    assert report["recommended"] is not None  # the host's own pick stands beside it
    assert dev["pushed"]["files"] >= 1 and dev["pushed"]["bytes"] > 0
    lines = proc.stdout.splitlines()
    head = lines.index(next(ln for ln in lines if ln.split() == ["variant", "host", "lo"]))
    table = lines[head:]
    for name in files:  # the host's p50 and the device's side by side, each with its own verdict
        row = next(ln for ln in table if ln.startswith(name + " "))
        assert row.count(" ms OK") == 2, row
    assert any(ln.startswith("lo: pick ") for ln in table) and any(ln.startswith("lo: pushed ") for ln in table)
    assert "<h2>Devices</h2>" in (tmp_path / "out" / "report.html").read_text()
    # a second run: nothing pushed again (ONNX files are built byte for byte the same; TorchScript's are not), the
    # host not timed (--on lo alone), the device's pick made
    again, report2 = _compare(tmp_path, "--variant", "onnx-fp32", "--on", "lo", out="out2")
    assert again.returncode == 0, again.stderr[-2000:]
    assert report2["devices"]["lo"]["pushed"]["files"] == 0
    assert report2["devices"]["lo"]["pushed"]["already_there"] >= 2
    assert "lo: pushed 0 file(s), 0.0 MB" in again.stdout
    assert report2["timed_on_host"] is False and report2["devices"]["lo"]["recommended"] is not None


def _wait_for_child(cache: Path, phase: str, timeout_s: float = 180.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = _device_children(cache, phase)
        if pids:
            return pids[0]
        time.sleep(0.2)
    raise AssertionError(f"no device child in its {phase} phase within {timeout_s} s")


def _device_children(cache: Path, phase: str | None = None) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"mobilize.devices.child" in cmd and any(str(cache).encode() in c for c in cmd) \
                    and (phase is None or phase.encode() in cmd):
                out.append(int(d.name))
    return out


def _long_rounds(tmp_path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([MOBILIZE, "compare", "zoo:conv_bn_relu", "--variant", "torchscript-frozen", "--rounds",
                             "5", "--iter", "400000", "--time-budget", "1", "-o", str(tmp_path / "out"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sshd_killed_during_the_device_rounds(lo, sshd, tmp_path):
    proc = _long_rounds(tmp_path, "--on", "lo")
    _wait_for_child(lo, "time")
    time.sleep(1.0)
    sshd.kill()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    row = report["devices"]["lo"]["variants"]["torchscript-frozen"]
    assert row["outcome"] == "DEVICE_LOST" and "connection to lo was lost during the timed rounds" in row["reason"]
    host = {v["name"]: v for v in report["variants"]}
    assert host["torchscript-frozen"]["outcome"] == "OK"  # the host's check stands
    assert "lo: torchscript-frozen: DEVICE_LOST" in out
    deadline = time.monotonic() + 30
    while _device_children(lo) and time.monotonic() < deadline:  # it noticed its stdin close, alone
        time.sleep(0.2)
    assert not _device_children(lo), "the device child outlived its connection"
    sshd.__enter__()  # the next tests' server, on a new port
    subprocess.run([MOBILIZE, "devices", "add", "lo", sshd.url, "--ssh-config", str(sshd.config), "--python",
                    sys.executable, "--cache", str(lo)], check=True, capture_output=True)


def test_ctrl_c_leaves_nothing_on_the_device(lo, tmp_path):
    proc = _long_rounds(tmp_path, "--on", "lo")
    _wait_for_child(lo, "time")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    deadline = time.monotonic() + 30
    while _device_children(lo) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _device_children(lo)
    assert list((lo / "runs").iterdir()) == []  # the run folder removed too


def test_verify_a_file_on_the_device_against_the_float_model(lo, tmp_path, run_cli):
    """verify --on a device over SSH: the file's outputs from the device's own kernels and the host's, both judged
    against the float model on the same samples, and how far apart they are (the same CPU here: exact or close)."""
    code, _, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", "onnx-fp32", "-o", tmp_path / "o")
    assert code == 0, err
    [onnx] = (tmp_path / "o").rglob("*.onnx")
    proc = subprocess.run([MOBILIZE, "verify", str(onnx), "--on", "lo", "--model", "zoo:conv_bn_relu", "--samples",
                           "8", "--json", str(tmp_path / "v.json")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "v.json").read_text())
    assert result["device"]["name"] == "lo" and result["facts"]["machine"] == os.uname().machine
    assert result["outcome"] == result["host_outcome"] == "OK" and not result["differs_from_host"]
    assert result["verdict"]["rule"] == "float-sqnr" and result["samples"] == 8
    assert result["agreement_with_host"]["sqnr_db"] is None or result["agreement_with_host"]["sqnr_db"] > 60
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("verdict: lo OK | host OK | lo vs host: ") and lines[4].startswith("  lo ran on ")
    bad = subprocess.run([MOBILIZE, "verify", str(onnx), "--on", "lo", "--cpu", "cortex-a53"], capture_output=True,
                         text=True)
    assert_one_line_error(bad.returncode, bad.stderr, "--cpu picks the emulated CPU of --on arm64")
    bad = subprocess.run([MOBILIZE, "verify", str(onnx), "--on", "nosuch"], capture_output=True, text=True)
    assert_one_line_error(bad.returncode, bad.stderr, "unknown device 'nosuch'")


def test_bench_a_file_on_the_device(lo, tmp_path, run_cli):
    code, _, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", "onnx-fp32", "-o", tmp_path / "o")
    assert code == 0, err
    [onnx] = (tmp_path / "o").rglob("*.onnx")
    proc = subprocess.run([MOBILIZE, "bench", str(onnx), "--on", "lo", "--iter", "50", "--json", str(tmp_path / "b.json")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "b.json").read_text())
    assert report["iterations"] == 50 and report["latency_ms_p50"] > 0
    assert report["facts"]["machine"] == os.uname().machine and report["device"]["name"] == "lo"
    assert proc.stdout.startswith(f"Statistics on lo: {onnx}")
    for extra, fragment in ((["--native"], "--native is not offered with --on lo"),
                            ([], "times a file; 'zoo:conv_bn_relu' is not one")):
        target = "zoo:conv_bn_relu" if not extra else str(onnx)
        bad = subprocess.run([MOBILIZE, "bench", target, "--on", "lo", *extra], capture_output=True, text=True)
        assert_one_line_error(bad.returncode, bad.stderr, fragment)
