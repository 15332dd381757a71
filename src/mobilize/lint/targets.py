"""Per-target op support, found by really converting or partitioning the model: one probe per backend.

``xnnpack`` partitions the exported graph with ExecuTorch's XnnpackPartitioner; ``onnxruntime``
exports ONNX and reads the providers' node assignment; ``nnapi`` runs PyTorch's NNAPI converter;
``litert`` converts with litert-torch and reads which ops the LiteRT interpreter's delegate took.
A probe whose packages are missing says so (status ``unavailable``, with the pip command).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from typing import Any

from mobilize.core.packages import missing
from mobilize.lint.report import TargetSupport


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


@contextlib.contextmanager
def quiet_torch_logs():
    """torch.export prints the partial graph to sys.stderr when a capture fails, and dynamo logs at WARNING
    ("Unable to find user code corresponding to {u0}"); the probe's result carries the one line that matters."""
    import io

    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
               if name == "torch" or name.startswith("torch.")]
    saved = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for lg, level in saved:
            lg.setLevel(level)


def module_path_from_stack(stack: dict | None) -> str:
    """The innermost module path of a torch.export ``nn_module_stack`` (``""``: the model's own forward)."""
    if not stack:
        return ""
    return str(list(stack.values())[-1][0])
