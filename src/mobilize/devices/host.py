"""The machine mobilize runs on, as a device: the child started here as a process (compare's own rounds stay in
:mod:`mobilize.compare`; this kind is for ``bench --on host`` and the device tests' side-by-side)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mobilize.core.errors import UserError
from mobilize.devices.base import Device, run_process


class HostDevice(Device):
    kind = "host"

    def execute(self, folder: Path, phase: str, timeout_s: float, log_path: str | None) -> str:
        import mobilize

        src = Path(mobilize.__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
        done = run_process([sys.executable, "-m", "mobilize.devices.child", str(folder), phase], env=env,
                           timeout_s=timeout_s, log_path=log_path, what=f"{phase} on {self.name}")
        if done.returncode != 0:
            raise UserError(f"{phase} on {self.name}: the child {done.how()}: {done.stderr_tail}")
        return done.stdout
