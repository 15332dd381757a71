"""The Exporter base class: capabilities as class attributes, atomic files, a manifest, notes.

An exporter author sets ``name``, ``format``, ``suffix``, ``packages`` and ``Config`` and implements
``write(module, ctx, path)``, which writes the file at ``path`` (a temp name that is renamed into
place only on success).  What the file promises against the module it came from (float to
rounding, reduced precision, or quantized) is declared by one method, ``expectation(ctx)``; the
verify core judges by it with the Policy's rule for that kind (no per-exporter tolerance).
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import time
from pathlib import Path
from typing import Any, ClassVar

from mobilize.accuracy.verify import Kind
from mobilize.core.artifact import Artifact, Format, atomic_path
from mobilize.core.context import Context
from mobilize.core.errors import ExportError, MobilizeError, translate_errors, typed_headline
from mobilize.core.packages import require


@dataclasses.dataclass(frozen=True)
class Expectation:
    """What an exported file promises against the module it was exported from."""

    kind: Kind = Kind.FLOAT
    """float: equal up to rounding; reduced: fp16/bf16; quantized: the exporter quantized it (each judged by
    the verify core's rule for its kind)."""


@dataclasses.dataclass(frozen=True)
class ExporterConfig:
    pass


class Exporter(abc.ABC):
    name: ClassVar[str]
    format: ClassVar[Format]
    suffix: ClassVar[str]
    packages: ClassVar[tuple[str, ...]] = ("torch",)
    Config: ClassVar[type] = ExporterConfig
    source_formats: ClassVar[tuple[Format, ...]] = ()
    """Formats of files made elsewhere this exporter also builds from (besides a PyTorch module): what
    ``compare FILE`` can derive from a user's file."""

    def __init__(self, config: Any = None):
        self.config = config if config is not None else self.Config()
        self.notes: list[str] = []

    def requires(self, ctx: Context) -> None:
        """Raise ConfigError naming the fix if this exporter cannot run now."""

    def expectation(self, ctx: Context | None) -> Expectation:
        """What the file promises against the module it was exported from (the one tolerance method)."""
        return Expectation(Kind.FLOAT)

    def decided(self, ctx: Context) -> dict[str, Any]:
        """The options this config leaves to the context (``--target``) and what the context decides for them, by
        field name: the recipe recorded beside the file pins them, so it rebuilds the same file whatever machine or
        target it is built for next ({} when nothing is left)."""
        return {}

    def check_available(self) -> None:
        require(self.packages, f"exporter '{self.name}'")

    @abc.abstractmethod
    def write(self, module: Any, ctx: Context, path: Path) -> None:
        """Write the artifact file at ``path``; record anything not done with ``self.note``."""

    def note(self, text: str) -> None:
        self.notes.append(f"{self.name}: {text}")

    def export(self, module: Any, ctx: Context, stem: str | Path, recipe: dict | None = None) -> Artifact:
        self.check_available()
        self.requires(ctx)
        stem = Path(stem)
        path = stem if stem.name.endswith(self.suffix) else stem.with_name(stem.name + self.suffix)
        start = time.perf_counter()
        with translate_errors(ExportError, f"exporter '{self.name}'", ours=(inspect.getfile(type(self)),),
                              message=lambda exc: f"exporter '{self.name}' failed: {typed_headline(exc)}", stage="export"):
            try:
                with atomic_path(path) as tmp:
                    self.write(module, ctx, tmp)
            except MobilizeError as exc:
                exc.stage = exc.stage or "export"
                raise
        ctx.timings_ms[f"export:{self.name}"] = (time.perf_counter() - start) * 1e3
        art = Artifact(path=path, format=self.format, input_specs=list(ctx.input_specs), recipe=recipe,
                       notes=list(ctx.notes) + self.notes, bound_args=dict(ctx.bound_args))
        art.write_manifest()
        return art
