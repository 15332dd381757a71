"""``lite``: the TorchScript pipeline saved for the PyTorch Mobile lite interpreter (``.ptl``).

    >>> art = EXPORTERS.get("lite")().export(model, ctx, "out/model")
    >>> art.path.name
    'model.ptl'
"""

from __future__ import annotations

from pathlib import Path

import torch

from mobilize.artifact import Format
from mobilize.exporters import EXPORTERS
from mobilize.exporters.torchscript import TorchScriptExporter


@EXPORTERS.register("lite")
class LiteExporter(TorchScriptExporter):
    name = "lite"
    format = Format.LITE
    suffix = ".ptl"

    def save(self, scripted: torch.jit.ScriptModule, path: Path) -> None:
        scripted._save_for_lite_interpreter(str(path))
