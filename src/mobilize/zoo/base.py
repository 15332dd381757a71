"""What a zoo entry declares: how to build the model and the inputs it takes."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from mobilize.core.inputs import InputSpec


@dataclasses.dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[..., Any]
    """Returns an ``nn.Module`` in eval mode (weights loaded where the entry ships them)."""
    input_specs: tuple[InputSpec, ...]
    description: str = ""
    num_classes: int = 1000
    task: str | None = None
    """The model's task when its outputs alone do not say it (``generation`` for a causal LM: compare then builds
    decoder files with a KV cache and times them in tokens)."""
