"""The one descriptor every engine registers: what it reads and writes, and where its parts are.

An engine is one folder under ``mobilize/backends/``; its ``__init__.py`` registers one
:class:`Backend` in ``BACKENDS``.  Everything outside the folder reaches the engine through this
descriptor: entries are ``"module:attribute"`` strings inside the folder, imported only when used,
so listing the engines costs no engine import.

    >>> from mobilize.backends import BACKENDS
    >>> BACKENDS.get("onnxruntime").exporters
    {'onnx': 'exporter:OnnxExporter'}
    >>> BACKENDS.get("onnxruntime").formats["onnx"]
    'onnxruntime'
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Mapping

from mobilize.errors import InternalError


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str
    """The folder's name (``executorch``)."""
    formats: Mapping[str, str]
    """Each file format the engine owns -> the runtime that runs it by default."""
    suffixes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """File suffix -> format (``.pte`` -> ``executorch``)."""
    exporters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Exporter key (as recipes name it) -> ``module:Class``."""
    runtimes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Runtime key -> ``module:Class`` (a Session)."""
    side_files: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Format -> suffixes of files that belong beside it (an OpenVINO ``.xml``'s ``.bin``)."""
    claims: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Format -> ``module:function(path, suffix_format) -> bool``: a file whose suffix names another format that
    this engine recognises as its own (an NNAPI model is a ``.ptl`` lite-interpreter archive)."""
    complete: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Format -> ``module:function(path)`` raising UnsupportedModelError for a cut or corrupt file."""
    lint_targets: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Lint target name -> the probe module (``PACKAGES``, ``HOW``, ``PIP``, ``probe(subject)``)."""
    profilers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Format -> ``module:function(path, inputs, threads, runs, warmup) -> TimeProfile``."""
    drift: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Exporter key -> the module tune localises per-layer int8 drift with."""
    noise: tuple[str, ...] = ()
    """Substrings of the engine's own log lines that tell a user nothing they can act on (dropped from the
    terminal and from a failure's log tail; see :mod:`mobilize.noise`)."""
    tools: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Other entry points a command asks for by name (``details`` for the native runner, ``from_log`` for
    ``bench --from-log``) -> ``module:attribute``."""

    def load(self, entry: str) -> Any:
        """Import ``module:attribute`` (or a whole ``module``) from this backend's folder."""
        module_name, _, attr = entry.partition(":")
        module = importlib.import_module(f"mobilize.backends.{self.name}.{module_name}")
        if not attr:
            return module
        try:
            return getattr(module, attr)
        except AttributeError:
            raise InternalError(f"backend '{self.name}' names {entry}, which does not exist") from None

    def entry(self, field: str, key: str) -> Any:
        """The object behind ``getattr(self, field)[key]``, or None when the backend has no such entry."""
        value = getattr(self, field).get(key)
        return None if value is None else self.load(value)
