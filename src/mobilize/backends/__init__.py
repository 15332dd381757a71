"""Backends: one folder per engine, each registering one :class:`Backend` descriptor.

Nothing outside a backend imports its modules: exporters and runtimes are found through the
``EXPORTERS`` and ``RUNTIMES`` views over these descriptors, and lint, profile, tune, bench and
the native runners ask the lookups in :mod:`mobilize.core.backend`.  Adding an engine is one new folder.

    >>> sorted(BACKENDS.names())
    ['eager', 'executorch', 'litert', 'llamacpp', 'nnapi', 'onnxruntime', 'openvino', 'torchscript']
    >>> format_for_suffix(".pte"), default_runtime("onnx")
    ('executorch', 'onnxruntime')
"""

from mobilize.core.backend import (  # noqa: F401  (the package's public face)
    BACKENDS, Backend, all_backends, entries, suffixes, format_for_suffix, claim,
    backend_for_format, backend_for_runtime, formats, default_runtime, side_files, checker_for, profiler_for,
    profilable_formats, lint_targets, drift_for, tool,
)

__all__ = [
    "BACKENDS", "Backend", "all_backends", "entries", "suffixes", "format_for_suffix", "claim",
    "backend_for_format", "backend_for_runtime", "formats", "default_runtime", "side_files", "checker_for", "profiler_for",
    "profilable_formats", "lint_targets", "drift_for", "tool",
]
