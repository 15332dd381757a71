"""Backends: one folder per engine, each registering one :class:`Backend` descriptor.

Nothing outside a backend imports its modules: exporters and runtimes are found through the
``EXPORTERS`` and ``RUNTIMES`` views over these descriptors, and lint, profile, tune, bench and
the native runners ask the helpers below.  Adding an engine is one new folder.

    >>> sorted(BACKENDS.names())
    ['eager', 'executorch', 'litert', 'nnapi', 'onnxruntime', 'openvino', 'torchscript']
    >>> format_for_suffix(".pte"), default_runtime("onnx")
    ('executorch', 'onnxruntime')
"""

from __future__ import annotations

from typing import Any, Callable

from mobilize.backends.base import Backend
from mobilize.registry import Registry

BACKENDS: Registry[Backend] = Registry("backend", "mobilize.backends")


def all_backends() -> list[Backend]:
    return [BACKENDS.get(name) for name in BACKENDS.names()]


def entries(field: str) -> dict[str, tuple[Backend, str]]:
    """Every backend's ``field`` merged: key -> (backend, entry)."""
    return {key: (b, value) for b in all_backends() for key, value in getattr(b, field).items()}


def suffixes() -> dict[str, str]:
    return {suffix: fmt for b in all_backends() for suffix, fmt in b.suffixes.items()}


def format_for_suffix(suffix: str) -> str | None:
    return suffixes().get(suffix.lower())


def claim(path: Any, fmt: str) -> str:
    """``fmt`` unless a backend recognises the file as one of its own formats."""
    for b in all_backends():
        for own, entry in b.claims.items():
            if own != fmt and b.load(entry)(path, fmt):
                return own
    return fmt


def backend_for_format(fmt: str) -> Backend | None:
    return next((b for b in all_backends() if str(fmt) in b.formats), None)


def formats() -> list[str]:
    return sorted(f for b in all_backends() for f in b.formats)


def default_runtime(fmt: str) -> str | None:
    backend = backend_for_format(fmt)
    return backend.formats[str(fmt)] if backend else None


def side_files(fmt: str) -> tuple[str, ...]:
    backend = backend_for_format(fmt)
    return tuple(backend.side_files.get(str(fmt), ())) if backend else ()


def checker_for(fmt: str) -> Callable[[Any], None] | None:
    backend = backend_for_format(fmt)
    return backend.entry("complete", str(fmt)) if backend else None


def profiler_for(fmt: str) -> Callable[..., Any] | None:
    backend = backend_for_format(fmt)
    return backend.entry("profilers", str(fmt)) if backend else None


def profilable_formats() -> list[str]:
    return sorted(entries("profilers"))


def lint_targets() -> dict[str, tuple[Backend, str]]:
    return entries("lint_targets")


def drift_for(exporter: str) -> Any:
    found = entries("drift").get(exporter)
    return found[0].load(found[1]) if found else None


def tool(backend: str, name: str) -> Any:
    """A backend's named entry point (``tool("nnapi", "from_log")``), or None when it has none."""
    return BACKENDS.get(backend).entry("tools", name)
