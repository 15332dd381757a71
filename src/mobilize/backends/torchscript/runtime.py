"""TorchScript (``.pt``) through ``torch.jit.load``.
"""

from __future__ import annotations

from mobilize.core.errors import UnsupportedModelError, translate_errors
from mobilize.runtimes.torch_session import TorchSession


class TorchScriptSession(TorchSession):
    name = "torchscript"
    formats = ("torchscript", "lite")

    def _load(self) -> None:
        import torch

        with translate_errors(UnsupportedModelError, f"{self.target.path} is not a loadable TorchScript file"):
            self.module = torch.jit.load(str(self.target.path), map_location="cpu")
        self.module.eval()

    def bundled_inputs(self) -> list[list]:
        if not hasattr(self.module, "get_all_bundled_inputs"):
            return super().bundled_inputs()
        return [list(inp) for inp in self.module.get_all_bundled_inputs()]
