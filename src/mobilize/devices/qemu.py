"""The arm64 root under QEMU user emulation (``scripts/setup-arm64.sh``) as a device: arm64 kernels compute the
outputs, so its verdicts are the arm64 kernels' verdicts; its wall times are an emulator's and never a latency
(the device is labelled emulated and compare times nothing there)."""

from __future__ import annotations

import shutil
from pathlib import Path

from mobilize.arm64.run import DEFAULT_CPU, child_command, check_cpu, missing, root_dir
from mobilize.core.errors import BackendUnavailableError, UserError
from mobilize.devices.base import Device, run_process


class QemuDevice(Device):
    kind = "arm64"

    def __init__(self, name: str = "arm64", cpu: str = DEFAULT_CPU) -> None:
        super().__init__(name)
        self.cpu = check_cpu(cpu)
        self.emulated = f"QEMU user emulation of {cpu}: times are the emulator's, not a latency"

    def describe(self) -> dict:
        return {**super().describe(), "qemu_cpu": self.cpu}

    def staging(self) -> Path | None:
        why = missing()
        if why:
            raise BackendUnavailableError(f"device {self.name}: {why}")
        return root_dir() / "rootfs" / "tmp"

    def place(self, src: Path, dest: Path) -> None:
        shutil.copy2(src, dest)  # a link would point outside the root

    def execute(self, folder: Path, phase: str, timeout_s: float, log_path: str | None) -> str:
        command, env = child_command(folder, "arm64", self.cpu, module="mobilize.devices.child")
        done = run_process([*command, phase], env=env, timeout_s=timeout_s, log_path=log_path,
                           what=f"{phase} on {self.name} (emulation runs 10-100x slower than the host)")
        if done.returncode != 0:
            raise UserError(f"{phase} on {self.name}: the child {done.how()}: {done.stderr_tail}")
        return done.stdout
