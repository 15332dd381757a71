"""Per-target op support, found by really converting or partitioning the model: one probe per backend.

``xnnpack`` partitions the exported graph with ExecuTorch's XnnpackPartitioner; ``onnxruntime``
exports ONNX and reads the providers' node assignment; ``nnapi`` runs PyTorch's NNAPI converter;
``litert`` converts with litert-torch and reads which ops the LiteRT interpreter's delegate took.
A probe whose packages are missing says so (status ``unavailable``, with the pip command).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from mobilize.core.packages import missing
from mobilize.lint.support import TargetSupport, quiet_torch_logs


@dataclasses.dataclass
class ProbeInput:
    """What every probe gets: the eval-mode module, seeded example inputs, the config, and a cache the
    probes and the timing share (the ONNX export is made once)."""

    module: Any
    example: list
    config: Any
    cache: dict[str, Any] = dataclasses.field(default_factory=dict)


def probe_module(name: str) -> Any:
    """The lint probe module of target ``name`` (``PACKAGES``, ``PIP``, ``HOW``, ``LABEL``, ``FIX``, ``probe``)."""
    from mobilize.backends import lint_targets

    backend, entry = lint_targets()[name]
    return backend.load(entry)


def probe(name: str, subject: ProbeInput) -> TargetSupport:
    plugin = probe_module(name)
    gone = missing(plugin.PACKAGES)
    if gone:
        return TargetSupport(name, "unavailable", plugin.HOW,
                             summary=f"not checked: {', '.join(gone)} not installed (pip install {plugin.PIP})")
    start = time.perf_counter()
    with quiet_torch_logs():
        result = plugin.probe(subject)
    result.seconds = round(time.perf_counter() - start, 3)
    return result
