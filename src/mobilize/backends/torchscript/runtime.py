"""TorchScript (``.pt``) through ``torch.jit.load``.
"""

from __future__ import annotations

from mobilize.backends.torchscript.bound import forward_arguments, unbound_arguments
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
        arguments = forward_arguments(self.module)
        self.bound = {k: v for k, v in getattr(self.target, "bound_args", {}).items() if k in arguments}
        """``--input NAME=VALUE`` the file's forward still takes (a file mobilize built has them bound inside)."""
        self._names = [n for n in arguments if n not in self.bound]

    def declared_input_names(self) -> list[str]:
        return list(self._names)

    def unbound_arguments(self) -> list[str]:
        return unbound_arguments(self.module, self.bound)

    def bundled_inputs(self) -> list[list]:
        if not hasattr(self.module, "get_all_bundled_inputs"):
            return super().bundled_inputs()
        return [list(inp) for inp in self.module.get_all_bundled_inputs()]
