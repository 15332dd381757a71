"""An aarch64 device reached over real SSH (issue #64): the loopback sshd (tests/devices/loopback.py) whose every
login enters the arm64 root under QEMU (cortex-a76), so ``compare --on`` that device pushes the files over SSH and
its verdicts come from arm64 kernels; the device says it is emulated and is never timed.  Run with
``pytest -m arm64 tests/arm64`` (CI runs it where the root exists)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from mobilize.arm64.run import missing, root_dir
from tests.devices.loopback import MISSING, LoopbackSshd, arm64_login

pytestmark = [pytest.mark.arm64, pytest.mark.skipif(missing() is not None, reason=f"arm64: {missing()}"),
              pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]
MOBILIZE = os.path.join(os.path.dirname(sys.executable), "mobilize")


def test_compare_on_an_arm64_device_over_ssh(tmp_path, monkeypatch):
    rootfs = root_dir() / "rootfs"
    cache = f"/tmp/mobilize-device-test-{uuid.uuid4().hex[:8]}"  # inside the root
    monkeypatch.setenv("MOBILIZE_DEVICES", str(tmp_path / "devices.json"))
    try:
        with LoopbackSshd(tmp_path / "sshd", force_command=str(arm64_login(tmp_path, rootfs, "cortex-a76"))) as sshd:
            subprocess.run([MOBILIZE, "devices", "add", "a64", sshd.url, "--ssh-config", str(sshd.config), "--python",
                            "/usr/bin/python3", "--cache", cache], check=True, capture_output=True)
            proc = subprocess.run([MOBILIZE, "compare", "zoo:conv_bn_relu", "--plan", "arm64", "--variant",
                                   "executorch-int8", "--variant", "onnx-int8", "--on", "a64", "--rounds", "1",
                                   "--time-budget", "1", "-o", str(tmp_path / "out")], capture_output=True, text=True,
                                  timeout=1800)
    finally:
        shutil.rmtree(rootfs / cache.lstrip("/"), ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dev = json.loads((tmp_path / "out" / "report.json").read_text())["devices"]["a64"]
    assert dev["facts"]["machine"] == "aarch64" and dev["qemu_cpu"] == "cortex-a76"
    assert dev["facts"]["cpu"]["model"] == "Cortex-A76"  # named from the part number the emulated CPU reports
    assert dev["cpu_features"]["dotprod"] and not dev["cpu_features"]["i8mm"]
    assert "QEMU user emulation of cortex-a76" in dev["emulated"] and dev["recommended"] is None
    for name in ("executorch-int8", "onnx-int8"):
        row = dev["variants"][name]
        assert row["outcome"] == "OK" and row["verdict"]["rule"] == "quantized-sqnr", row
        assert "latency" not in row and row["timing"].startswith("not timed: QEMU user emulation")
    assert "OK (emulated: not timed)" in proc.stdout
