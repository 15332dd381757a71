"""Registries: one per kind of plugin (zoo models, passes, backends, and the exporters and runtimes inside them).

A plugin is one module in the registry's package, named after its key; the module registers
its object with ``@REGISTRY.register("key")`` when it is imported.  Lookup imports the module
lazily, so ``import mobilize`` stays cheap and optional backends load only when used.  The
set of names is the set of modules in the folder: there is no second, hand-kept list.

A registry can instead be a view over an index (``EXPORTERS`` and ``RUNTIMES`` read the backends'
descriptors): its names are the index's keys and each entry is a ``package.module:Attribute``.

    >>> from mobilize.core.backend import RUNTIMES
    >>> "onnxruntime" in RUNTIMES.names()
    True
    >>> RUNTIMES.get("onnxrt")
    Traceback (most recent call last):
    mobilize.core.errors.ConfigError: unknown runtime 'onnxrt' (did you mean: onnxruntime? choose one of: ...)
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from typing import Callable, Generic, Mapping, Sequence, TypeVar

from mobilize.core.errors import ConfigError, InternalError

T = TypeVar("T")

_NOT_PLUGINS = {"base"}


def did_you_mean(name: str, choices: Sequence[str], what: str | None = "choose one of", n: int = 3,
                 cutoff: float = 0.6, otherwise: str = "") -> str:
    """The one "did you mean" hint: close matches first, then every choice (``what: a, b``; ``what=None`` lists
    none, for long lists, and gives ``otherwise`` when nothing is close).

    >>> did_you_mean("onnxrt", ["onnxruntime", "openvino"], cutoff=0.5)
    'did you mean: onnxruntime? choose one of: onnxruntime, openvino'
    >>> did_you_mean("conv9", ["conv1", "fc"], what=None)
    'did you mean: conv1?'
    """
    close = difflib.get_close_matches(name, list(choices), n=n, cutoff=cutoff)
    text = f"{what}: {', '.join(choices) or 'none'}" if what else ""
    if not close:
        return text or otherwise
    return f"did you mean: {', '.join(close)}?" + (f" {text}" if text else "")


class Registry(Generic[T]):
    def __init__(self, kind: str, package: str | None = None, index: Callable[[], Mapping[str, str]] | None = None,
                 folders_only: bool = False, shared: tuple[str, ...] = (), adopt: Callable[[str, T], T] | None = None):
        self.kind = kind
        self.package = package
        self.folders_only = folders_only
        """Only sub-packages are plugins (an engine is a folder; modules beside them are shared code)."""
        self.shared = frozenset(shared) | _NOT_PLUGINS
        """Modules of the package that are shared code its plugins use, not plugins."""
        self.index = index
        """name -> ``package.module:Attribute`` (a view over other registries' descriptors)."""
        self.adopt = adopt
        """Called once with (name, object) when an indexed entry is first loaded: fills in or checks what the
        descriptor already says (a runtime's name and formats)."""
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            module = getattr(obj, "__module__", "") if isinstance(obj, type) or callable(obj) else ""
            if self.package and module.startswith(self.package + ".") \
                    and module.rsplit(".", 1)[-1] not in (name, "base"):
                raise InternalError(f"{self.kind} '{name}' must live in {self.package}.{name}")
            self._entries[name] = obj
            return obj

        return decorator

    def names(self) -> list[str]:
        found: set[str] = set()
        if self.index is not None:
            found = set(self.index())
        if self.package is not None:
            pkg = importlib.import_module(self.package)
            found |= {m.name for m in pkgutil.iter_modules(pkg.__path__)
                      if not m.name.startswith("_") and m.name not in self.shared and (m.ispkg or not self.folders_only)}
        return sorted(found | set(self._entries))

    def get(self, name: str) -> T:
        if ":" in name:
            return self._external(name)
        if name not in self._entries:
            index = self.index() if self.index is not None else {}
            if name in index:
                module_name, _, attr = index[name].partition(":")
                found = getattr(importlib.import_module(module_name), attr)
                self._entries[name] = self.adopt(name, found) if self.adopt else found
            elif self.package is not None and name in self.names():
                importlib.import_module(f"{self.package}.{name}")
            if name not in self._entries:
                raise ConfigError(f"unknown {self.kind} '{name}'", hint=did_you_mean(name, self.names(), cutoff=0.5))
        return self._entries[name]

    def _external(self, reference: str) -> T:
        """A plugin outside the package, named ``package.module:Name`` (user or test plugins)."""
        module_name, _, attr = reference.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"cannot import {self.kind} '{reference}': {exc}") from exc
        if not hasattr(module, attr):
            raise ConfigError(f"module '{module_name}' has no {self.kind} '{attr}'")
        return getattr(module, attr)

    def __contains__(self, name: str) -> bool:
        return name in self.names()
