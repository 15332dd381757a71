"""How ``mobilize lint`` runs: which targets, the rules' thresholds, the timing.  Cheap to import (no torch).

    >>> LintConfig(targets=parse_targets("xnnpack,nnapi")).targets
    ('xnnpack', 'nnapi')
    >>> LintConfig.from_dict({"channel_divisor": 16}).channel_divisor
    16
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from mobilize.core.errors import ConfigError

def all_targets() -> tuple[str, ...]:
    """Every lint target a backend declares (its op-support probe), in the backends' order."""
    from mobilize.backends import lint_targets

    return tuple(lint_targets())


@dataclasses.dataclass(frozen=True)
class LintConfig:
    targets: tuple[str, ...] = dataclasses.field(default_factory=all_targets)
    """Target backends to probe: xnnpack, onnxruntime, nnapi, litert (empty: none)."""
    channel_divisor: int = 8
    """Channel counts should be multiples of this (the float vector width of mobile kernels)."""
    depthwise_min_in_channels: int = 16
    """Standard convs with fewer input channels (image stems) are not suggested as depthwise-separable."""
    depthwise_min_factor: float = 3.0
    """Flag a standard conv when depthwise-separable would need this many times fewer MACs."""
    int8_samples: int = 16
    """Real samples (from data) for the measured int8 error of flagged activations."""
    xnnpack_lower: bool = False
    """Lower completely for XNNPACK (slower) instead of stopping once the partitioner has tagged the graph."""
    onnxruntime_providers: tuple[str, ...] = ()
    """Execution providers to try, preferred first (empty: every provider this onnxruntime has, CPU last)."""
    time: bool | None = None
    """Measure per-layer time on ONNX Runtime; None: when data is given."""
    time_runs: int = 20
    time_warmup: int = 3
    time_threads: int = 1
    seed: int = 0
    """Seed of the random example inputs the profile and the probes use."""
    build_timeout_s: float | None = 300.0
    """How long building a model reference (the user's constructor, a file's load) may take before lint stops with
    a one-line error (None or 0: no limit).  ``mobilize lint --timeout`` sets it."""

    def __post_init__(self) -> None:
        unknown = [t for t in self.targets if t not in all_targets()]
        if unknown:
            raise ConfigError(f"unknown lint target '{unknown[0]}'", hint=f"choose from: {', '.join(all_targets())}, all")
        if self.channel_divisor < 1 or self.time_runs < 1 or self.time_threads < 1 or self.time_warmup < 0:
            raise ConfigError("channel_divisor, time_runs and time_threads must be at least 1, time_warmup at least 0")
        if self.build_timeout_s is not None and not self.build_timeout_s >= 0:
            raise ConfigError(f"the model-build time limit must be 0 (none) or more seconds, got {self.build_timeout_s}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LintConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown lint option '{unknown[0]}'", hint=f"options: {', '.join(sorted(names))}")
        data = {k: tuple(v) if k in ("targets", "onnxruntime_providers") else v for k, v in data.items()}
        return cls(**data)


def parse_targets(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"all"``, ``"none"``, ``"xnnpack,nnapi"`` or a list of names -> target tuple."""
    if text is None:
        return all_targets()
    items = [t.strip().lower() for part in ([text] if isinstance(text, str) else text) for t in part.split(",")]
    items = [t for t in items if t]
    if "all" in items:
        return all_targets()
    if items == ["none"]:
        return ()
    for t in items:
        if t not in all_targets():
            raise ConfigError(f"unknown lint target '{t}'", hint=f"choose from: {', '.join(all_targets())}, all, none")
    return tuple(dict.fromkeys(items))


