"""``lite``: the TorchScript pipeline saved for the PyTorch Mobile lite interpreter (``.ptl``).

From a TorchScript file made elsewhere whose forward takes a bound non-tensor argument (``--input sr=16000``), the
value is bound inside the ``.ptl``: the lite interpreter passes a forward's inputs by position only, so a file that
still took ``sr`` could not be called with it.  The loaded program is traced through a wrapper that calls it with the
value; its own control flow stays scripted (the trace records one call of it, not the path it took).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mobilize.backends.torchscript.bound import forward_arguments
from mobilize.backends.torchscript.exporter import TorchScriptExporter
from mobilize.core.context import Context
from mobilize.core.errors import UnsupportedModelError, translate_errors


class LiteExporter(TorchScriptExporter):
    name = "lite"
    format = "lite"
    suffix = ".ptl"

    def _load_file(self, art: Any, ctx: Context) -> torch.jit.ScriptModule:
        scripted = super()._load_file(art, ctx)
        arguments = forward_arguments(scripted)
        bound = {k: v for k, v in (getattr(art, "bound_args", None) or {}).items() if k in arguments}
        if not bound:
            return scripted
        what = ", ".join(f"{k}={v!r}" for k, v in bound.items())
        with translate_errors(UnsupportedModelError, f"cannot bind {what} inside a lite file of {art.path}",
                              hint="compare the module it was scripted from (file.py:Class)"), torch.no_grad():
            traced = torch.jit.trace(_Bound(scripted, bound).eval(), tuple(self._example(ctx))).eval()
        self.note(f"{what} bound inside the file (the lite interpreter passes a forward's inputs by position only): "
                  f"its forward takes the tensors only")
        return traced

    def save(self, scripted: torch.jit.ScriptModule, path: Path) -> None:
        scripted._save_for_lite_interpreter(str(path))


class _Bound(torch.nn.Module):
    """A scripted program called with its bound arguments by name; the tensors stay positional."""

    def __init__(self, program: torch.jit.ScriptModule, bound: dict[str, Any]) -> None:
        super().__init__()
        self.program = program
        self.bound = dict(bound)

    def forward(self, *tensors: torch.Tensor) -> Any:
        return self.program(*tensors, **self.bound)
