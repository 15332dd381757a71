"""The PyTorch Mobile lite interpreter (``.ptl``), as a phone runs it, on the host.
"""

from __future__ import annotations

from mobilize.core.errors import UnsupportedModelError, translate_errors
from mobilize.runtimes.torch_session import TorchSession


class LiteSession(TorchSession):
    name = "lite"
    formats = ("lite",)

    def _load(self) -> None:
        from torch.jit.mobile import _load_for_lite_interpreter

        with translate_errors(UnsupportedModelError, f"{self.target.path} is not a loadable lite-interpreter file",
                              hint="save it with module._save_for_lite_interpreter(path)"):
            self.module = _load_for_lite_interpreter(str(self.target.path))

    def run_prepared(self, native: tuple):
        import torch

        with torch.no_grad():
            return self.module(*native)

    def bundled_inputs(self) -> list[list]:
        if not self.module.find_method("get_all_bundled_inputs"):
            return super().bundled_inputs()
        return [list(inp) for inp in self.module.run_method("get_all_bundled_inputs")]
