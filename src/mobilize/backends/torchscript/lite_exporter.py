"""``lite``: the TorchScript pipeline saved for the PyTorch Mobile lite interpreter (``.ptl``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from mobilize.backends.torchscript.exporter import TorchScriptExporter


class LiteExporter(TorchScriptExporter):
    name = "lite"
    format = "lite"
    suffix = ".ptl"

    def save(self, scripted: torch.jit.ScriptModule, path: Path) -> None:
        scripted._save_for_lite_interpreter(str(path))
