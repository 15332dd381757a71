"""Plugins that misbehave on purpose, to prove `mobilize compare` records each failure and goes on.

Referenced from plans as ``tests.compare_plugins:Name`` (importable in the spawned workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from mobilize.exporters.base import Exporter
from mobilize.passes.base import Pass


class _Aborting(torch.nn.Module):
    def forward(self, x):
        os.abort()


class AbortOnRun(Pass):
    """The model it returns kills the process (SIGABRT) when run, like a crashing native runtime."""

    name = "abort_on_run"

    def run(self, module, ctx):
        return _Aborting()


class Hang(Pass):
    name = "hang"

    def run(self, module, ctx):
        time.sleep(3600)


class Perturb(Pass):
    """Adds large noise to every weight: runs fine, gives wrong answers."""

    name = "perturb"

    def run(self, module, ctx):
        with torch.no_grad():
            for p in module.parameters():
                p.add_(torch.randn_like(p) * p.abs().mean())
        return module


class BrokenExporter(Exporter):
    name = "broken"
    format = "onnx"
    suffix = ".onnx"

    def write(self, module, ctx, path: Path) -> None:
        path.write_bytes(b"half a file")
        raise RuntimeError("unsupported operator 'aten::frobnicate'")


class CoarseWeights(Pass):
    """Rounds every conv/linear weight to a few levels per tensor and declares the model quantized:
    a working but lossy "quantized" variant, deterministic on every CPU."""

    name = "coarse_weights"
    levels = 4

    def run(self, module, ctx):
        with torch.no_grad():
            for m in module.modules():
                if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                    w = m.weight
                    step = w.abs().max() / self.levels
                    w.copy_(torch.round(w / step) * step)
        ctx.quant.quantized = True
        return module


class RaisesKeyError(Pass):
    """A bug planted in a pass: mobilize must call it an internal error (exit 1), not the user's fault."""

    name = "raises_key_error"

    def run(self, module, ctx):
        return {}["missing"]


class CoarseWeights12(CoarseWeights):
    name = "coarse_weights12"
    levels = 12


class _Slowed(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module, stall_s: float = 0.02) -> None:
        super().__init__()
        self.inner = inner
        self.stall_s = stall_s

    def forward(self, x):
        time.sleep(self.stall_s)
        return self.inner(x)


class SlowDown(Pass):
    """Same answers, 20 ms slower per run: a variant that racing must drop as slower beyond noise."""

    name = "slow_down"

    def run(self, module, ctx):
        return _Slowed(module)


class Stall(Pass):
    """Same answers, 100 ms slower per run: slower than a sub-millisecond file by far more than the suite's other
    worker can move the machine's own speed (a 20 ms stall over a 3 ms file run beside it read as a busy machine)."""

    name = "stall"

    def run(self, module, ctx):
        return _Slowed(module, 0.1)


_CALLS: dict[int, int] = {}


class AbortAfterCalls(torch.nn.Module):
    """Answers its first ``calls`` runs in each process, then kills that process (SIGABRT): a native crash in the
    middle of the timed rounds, after the variant loaded and checked fine (the count is per process, not pickled)."""

    def __init__(self, calls: int):
        super().__init__()
        self.calls = calls

    def forward(self, x):
        _CALLS[id(self)] = _CALLS.get(id(self), 0) + 1
        if _CALLS[id(self)] > self.calls:
            os.abort()
        return x * 2
