"""The Pass base class: it owns preconditions, copying, timing, error wrapping and notes.

A pass author sets ``name`` and ``Config`` and implements ``run``; ordering rules go in
``requires`` and fail with the fix ("run `fuse` first").
"""

from __future__ import annotations

import abc
import copy
import inspect
import dataclasses
import time
from typing import Any, ClassVar

from mobilize.core.errors import MobilizeError, UnsupportedModelError, translate_errors, typed_headline
from mobilize.core.context import Context


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
        with translate_errors(UnsupportedModelError, f"pass '{self.name}'", ours=(inspect.getfile(type(self)),),
                              message=lambda exc: f"pass '{self.name}' failed on this model: {typed_headline(exc)}",
                              stage=self.name):
            try:
                out = self.run(module, ctx)
            except MobilizeError as exc:
                exc.stage = exc.stage or self.name
                raise
        ctx.timings_ms[self.name] = (time.perf_counter() - start) * 1e3
        ctx.applied.append(self.name)
        return out
