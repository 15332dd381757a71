"""What the torch-based runtimes (eager, torchscript, lite) share."""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.runtimes.base import RuntimeOptions, Session


class TorchSession(Session):
    packages = ("torch",)
    module: Any

    @classmethod
    def load(cls, target: Any, options: RuntimeOptions = RuntimeOptions()) -> "TorchSession":
        session = super().load(target, options)
        session.flush_denormals()
        return session

    def flush_denormals(self) -> None:
        """Denormal floats make x86 CPUs up to ~50x slower (seen here on a BN-folded MobileNetV2 over
        digit images); inference loses nothing by flushing them to zero, as mobile CPUs do."""
        import torch

        if self.options.flush_denormal and torch.set_flush_denormal(True):
            self.notes.append("denormal floats flushed to zero (torch.set_flush_denormal)")

    def prepare(self, inputs: Sequence[Any]) -> tuple:
        import torch

        return tuple(t if isinstance(t, torch.Tensor) else torch.as_tensor(t) for t in inputs)

    def run_prepared(self, native: tuple) -> Any:
        import torch

        with torch.inference_mode():
            return self.module(*native)

    def set_threads(self, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.threads = threads

    def close(self) -> None:
        self.module = None
