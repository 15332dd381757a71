"""The one descriptor every engine registers (what it reads and writes, and where its parts are), the
registry that holds them, and the lookups everything outside a backend asks.

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
from typing import Any, Callable, Mapping

from mobilize.core.errors import InternalError
from mobilize.core.registry import Registry


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
    terminal and from a failure's log tail; see :mod:`mobilize.core.noise`)."""
    tune: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Runtime -> ``module:ROUTE``, a :class:`mobilize.core.tune_route.TuneRoute`: how ``mobilize tune`` searches
    this engine (its starting recipes, fp32 twin, what shares a build, how it keeps lossy layers in float)."""
    native: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Format -> ``module:RUNNER``, a :class:`mobilize.core.native_runner.NativeRunner`: the C++ benchmark and app
    template that run this format outside Python (their sources live in the engine's folder)."""
    torch_archives: tuple[str, ...] = ()
    """Formats stored as PyTorch zip archives, which may hold a pickled module instead of a program (checked
    before anything unpickles them)."""
    file_plans: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Format -> the built-in plan ``compare FILE`` runs for a file of that format made elsewhere (the file is the
    reference; the variants are what builds from it)."""
    decoders: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Decoder variant name (``executorch-8da4w``) -> ``module:VARIANT``, a :class:`mobilize.core.decoder.
    DecoderVariant`: how this engine builds and runs a causal decoder with its KV cache (the ``generation`` plan is
    every engine's variants)."""
    compare_profile: tuple[str, ...] = ()
    """Formats whose time split (inside / outside the delegate, fallback ops) compare reports for every file."""
    conv_fused_activations: tuple[str, ...] = ()
    """Activations (torch spelling: ``relu``, ``sigmoid``) this engine's own fusion folds into the conv before
    them, as checked on the installed runtime (tests/lint/test_activation_fusion.py); lint's advice reads it."""
    delegate_hint: str = ""
    """Where a user finds the source line of an op that fell outside the delegate (said in profile warnings)."""
    tools: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Other entry points a command asks for by name (``details`` for the native runner, ``from_log`` for
    ``bench --from-log``) -> ``module:attribute``."""
    packages: tuple[str, ...] = ()
    """The Python packages (import names) whose presence and version decide what this engine builds and how fast it
    runs: their versions go into every sweep fingerprint and the arm64 root's report, and their frames count as
    library code in a traceback."""
    why_slow: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Format -> ``module:function(fp32_path, int8_path, inputs, runs) -> Diagnosis``
    (:class:`mobilize.profile.diagnosis.Diagnosis`): why an int8 file of this format is no faster than its fp32
    twin (tune asks it for every route whose int8 candidate lost)."""
    dynamic_int8: tuple[Mapping[str, Any], ...] = ()
    """Plan variants (as a plan file writes them) with int8 weights and activations quantized at run time: what a
    plan fitted to a Linear / attention model adds for this engine."""
    host_only: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Format -> why its files never run in the arm64 root (an Android-only format checked on a host interpreter)."""
    contract: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Runtime -> the key of this engine's exporter whose file the runtime's contract test runs (the tests export
    their tiny model with it); a runtime with none is tested on the shared fixture's file of one of its formats."""

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


BACKENDS: Registry[Backend] = Registry("backend", "mobilize.backends", folders_only=True)


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


def backend_for_runtime(runtime: str) -> Backend | None:
    return next((b for b in all_backends() if str(runtime) in b.runtimes), None)


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


def tool_anywhere(name: str) -> tuple[Backend, Any] | None:
    """The first engine (by name) that offers the entry point ``name``, and it; None when none does."""
    return next(((b, b.entry("tools", name)) for b in all_backends() if name in b.tools), None)


def tool(backend: str, name: str) -> Any:
    """A backend's named entry point (``tool("nnapi", "from_log")``), or None when it has none."""
    return BACKENDS.get(backend).entry("tools", name)


def why_slow_for(fmt: str) -> Callable[..., Any] | None:
    """The analysis that explains an int8 file of format ``fmt`` no faster than its fp32 twin, if its engine has one."""
    backend = backend_for_format(fmt)
    return backend.entry("why_slow", str(fmt)) if backend else None


def engine_packages() -> tuple[str, ...]:
    """Every engine's :attr:`Backend.packages`, in the registry's order, each once."""
    return tuple(dict.fromkeys(p for b in all_backends() for p in b.packages))


def profiled_every_file(fmt: str) -> bool:
    """Whether a file of ``fmt`` gets its time split (inside / outside the delegate) in every optimize and compare."""
    backend = backend_for_format(fmt)
    return backend is not None and str(fmt) in backend.compare_profile


def host_only(fmt: str) -> str | None:
    """Why files of ``fmt`` never run in the arm64 root; None when they do."""
    backend = backend_for_format(fmt)
    return backend.host_only.get(str(fmt)) if backend else None


def _index(field: str) -> Callable[[], dict[str, str]]:
    return lambda: {key: f"mobilize.backends.{b.name}.{entry}" for key, (b, entry) in entries(field).items()}


def _adopt_runtime(name: str, cls: Any) -> Any:
    """A runtime's ``name`` and ``formats`` are its descriptor's: filled in where the class leaves them out, and a
    one-line InternalError where the class says otherwise."""
    backend = backend_for_runtime(name)
    own = tuple(f for f, runtime in backend.formats.items() if runtime == name)
    if "name" not in vars(cls):
        cls.name = name
    elif cls.name != name:
        raise InternalError(f"runtime '{name}' of backend '{backend.name}' names itself '{cls.name}' "
                            f"({cls.__module__}.{cls.__qualname__}): drop its name, the descriptor gives it")
    if "formats" not in vars(cls):
        cls.formats = own
    elif set(own) - set(cls.formats):
        raise InternalError(f"runtime '{name}' of backend '{backend.name}' runs {list(cls.formats)}, not the "
                            f"format(s) {sorted(set(own) - set(cls.formats))} its descriptor defaults to it: "
                            f"drop its formats, the descriptor gives them")
    return cls


EXPORTERS: Registry = Registry("exporter", index=_index("exporters"))
"""Exporters: module -> Artifact, one per format, each inside its backend's folder (a view over the descriptors)."""
RUNTIMES: Registry = Registry("runtime", index=_index("runtimes"), adopt=_adopt_runtime)
"""Runtimes: Artifact (or eager module) -> Session, each inside its backend's folder (a view over the descriptors)."""
