"""The PyTorch Mobile lite interpreter (``.ptl``), as a phone runs it, on the host.
"""

from __future__ import annotations

from typing import Any, Sequence

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

    def held_state(self, inputs: Sequence[Any]) -> Any:
        """Held state by behaviour: a lite module's attributes cannot be listed, so two calls on the same input
        from a reset state that answer differently."""
        from mobilize.runtimes.held_state import HeldState, differ, fresh

        self.reset_state()
        first, second = self.run(fresh(inputs)), self.run(fresh(inputs))
        self.reset_state()
        return HeldState((), self._reset_name()) if differ(first, second) else None

    def reset_state(self) -> None:
        """The file's reset method, else the file loaded again (the state it was saved with)."""
        from mobilize.runtimes.held_state import call_reset

        name = self._reset_name()
        if name:
            call_reset(self.module, name)
        else:
            self._load()

    def _reset_name(self) -> str | None:
        from mobilize.runtimes.held_state import reset_method

        return reset_method(self.module)

    def run_prepared(self, native: tuple):
        import torch

        with torch.no_grad():
            return self.module(*native)

    def bundled_inputs(self) -> list[list]:
        if not self.module.find_method("get_all_bundled_inputs"):
            return super().bundled_inputs()
        return [list(inp) for inp in self.module.run_method("get_all_bundled_inputs")]
