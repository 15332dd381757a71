"""What the torch-based runtimes (eager, torchscript, lite) share."""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.runtimes.base import Session


class TorchSession(Session):
    packages = ("torch",)
    module: Any
    bound: dict[str, Any] = {}
    """Non-tensor forward arguments passed by name on every call (a TorchScript file's ``--input sr=16000``)."""

    def prepare(self, inputs: Sequence[Any]) -> tuple:
        import torch

        return tuple(t if isinstance(t, torch.Tensor) else torch.as_tensor(t) for t in inputs)

    def run_prepared(self, native: tuple) -> Any:
        import torch

        with torch.inference_mode():
            return self.module(*native, **self.bound)

    _keeper: Any = None

    def _loaded(self) -> None:
        import torch

        from mobilize.runtimes.held_state import StateKeeper

        if isinstance(self.module, torch.nn.Module):  # a lite-interpreter module keeps its own (LiteSession)
            self._keeper = StateKeeper(self.module, self.run)

    def held_state(self, inputs: Sequence[Any]) -> Any:
        return self._keeper.held_state(list(inputs)) if self._keeper is not None else None

    def reset_state(self) -> None:
        if self._keeper is not None:
            self._keeper.reset_state()

    def set_threads(self, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.threads = threads

    def close(self) -> None:
        self.module = None
