"""The Pass base class: it owns preconditions, copying, timing, error wrapping and notes.

A pass author sets ``name`` and ``Config`` and implements ``run``; ordering rules go in
``requires`` and fail with the fix ("run `fuse` first").

    >>> from mobilize.passes import PASSES
    >>> ctx = Context(input_specs=[InputSpec((1, 3, 224, 224))])
    >>> fused = PASSES.get("fuse")()(model, ctx)      # model itself is not modified
    >>> ctx.notes[-1]
    'fuse: folded 52 Conv-BN (35 with ReLU) ...'
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import time
from typing import Any, ClassVar

from mobilize.errors import ConfigError, MobilizeError, UnsupportedModelError, headline
from mobilize.sources.inputs import InputSpec, make_random_inputs


@dataclasses.dataclass
class Context:
    """What flows beside the module through passes and exporters."""

    input_specs: list[InputSpec] = dataclasses.field(default_factory=list)
    data: Any = None
    """A DataSource for calibration (None: no real data)."""
    applied: list[str] = dataclasses.field(default_factory=list)
    """Names of the steps run so far, in order."""
    notes: list[str] = dataclasses.field(default_factory=list)
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Facts passes leave for later steps: quantized, engine, interface, qat_prepared, ..."""
    timings_ms: dict[str, float] = dataclasses.field(default_factory=dict)

    def note(self, step: str, text: str) -> None:
        self.notes.append(f"{step}: {text}")

    def example_inputs(self, seed: int = 0) -> list:
        if not self.input_specs:
            raise ConfigError("the model's input shape is unknown", hint='give --input_dims, e.g. "1,3,224,224"')
        return make_random_inputs(self.input_specs, seed)

    def calibration_inputs(self, limit: int) -> list[list]:
        """Real samples when a data source is given, else a note and seeded random inputs."""
        if self.data is not None and len(self.input_specs) == 1:
            return [[x] for x in self.data.samples(self.input_specs[0], limit)]
        self.note("data", f"no data source: using {min(limit, 8)} seeded random inputs (give --data for real samples)")
        return [self.example_inputs(seed) for seed in range(min(limit, 8))]


@dataclasses.dataclass(frozen=True)
class PassConfig:
    inplace: bool = False
    """Modify the given module instead of a deep copy."""


class Pass(abc.ABC):
    name: ClassVar[str]
    Config: ClassVar[type] = PassConfig

    def __init__(self, config: Any = None):
        self.config = config if config is not None else self.Config()

    def requires(self, ctx: Context) -> None:
        """Raise ConfigError naming the fix if this pass cannot run now."""

    @abc.abstractmethod
    def run(self, module: Any, ctx: Context) -> Any: ...

    def __call__(self, module: Any, ctx: Context) -> Any:
        self.requires(ctx)
        if not getattr(self.config, "inplace", False):
            module = copy.deepcopy(module)
        start = time.perf_counter()
        try:
            out = self.run(module, ctx)
        except MobilizeError as exc:
            exc.stage = exc.stage or self.name
            raise
        except Exception as exc:
            first = headline(exc)
            raise UnsupportedModelError(f"pass '{self.name}' failed: {type(exc).__name__}: {first}",
                                        stage=self.name) from exc
        ctx.timings_ms[self.name] = (time.perf_counter() - start) * 1e3
        ctx.applied.append(self.name)
        return out
