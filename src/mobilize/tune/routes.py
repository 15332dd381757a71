"""The runtimes tune searches: every engine that declares a :class:`~mobilize.core.tune_route.TuneRoute`
(``Backend.tune``), looked up through the backend registry, never by name here.

    >>> sorted(runtimes())
    ['executorch', 'litert', 'onnxruntime']
    >>> route("onnxruntime").fp32_twin, default_runtimes()
    ('onnx-fp32', ('onnxruntime',))
"""

from __future__ import annotations

from mobilize.core.backend import entries
from mobilize.core.errors import ConfigError
from mobilize.core.tune_route import TuneRoute


def runtimes() -> list[str]:
    """Every runtime with a tune route, in the registry's order."""
    return list(entries("tune"))


def default_runtimes() -> tuple[str, ...]:
    """The runtimes tune searches when none are named: the routes that say so (``TuneRoute.default``)."""
    return tuple(name for name in runtimes() if route(name).default)


def route(runtime: str) -> TuneRoute:
    """The route of ``runtime``; a ConfigError naming the runtimes tune searches when it has none."""
    found = entries("tune").get(runtime)
    if found is None:
        raise ConfigError(f"tune does not search runtime '{runtime}'", hint=f"choose from: {', '.join(runtimes())}")
    backend, entry = found
    return backend.load(entry)
