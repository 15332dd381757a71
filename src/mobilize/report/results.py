"""Typed results of a compare run: one VariantResult per variant, written as report.json.

    >>> r = VariantResult("fused")
    >>> r.outcome, r.to_json()["outcome"]
    (<Outcome.PENDING: 'PENDING'>, 'PENDING')
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from mobilize.core.outcome import Outcome


VARIANT_JSON_SKIPS = ("latency", "details", "fidelity")
"""Fields ``to_json`` does not write as themselves: latency and details are merged in flat, fidelity sits in the
verdict."""


@dataclasses.dataclass
class VariantResult:
    name: str
    outcome: Outcome = Outcome.PENDING
    stage: str | None = None
    """The stage a failure happened in (None when it did not fail)."""
    notes: list[str] = dataclasses.field(default_factory=list)
    artifact: str | None = None
    format: str | None = None
    runtime: str | None = None
    kind: str | None = None
    """float | reduced | quantized | changed: what the variant promises against the float model (accuracy.verify.Kind)."""
    size_bytes: int | None = None
    load_ms: float | None = None
    first_run_ms: float | None = None
    accuracy: dict[str, Any] | None = None
    """The comparison with the float model (float64, scale-normalised) plus top-1, drop and its interval."""
    verdict: dict[str, Any] | None = None
    """The verify core's verdict: outcome, rule, reason, numbers."""
    latency: dict[str, Any] = dataclasses.field(default_factory=dict)
    """BenchStats fields (latency_ms_p50, ...) once timed."""
    latency_ms_round_medians: list[float] = dataclasses.field(default_factory=list)
    round_spread_percent: float | None = None
    speedup: dict[str, Any] | None = None
    """Against the reference variant: ratio with its 95% interval from paired rounds, and ``significant``."""
    frames: dict[str, Any] | None = None
    """``compare --frames``: camera frame to answer (:mod:`mobilize.camera.figures`): its statistics, round medians
    and speed-up (the race and the pick are made on them), each stage's p50 and share, and the infer check."""
    peak_rss_mb: float | None = None
    """Peak resident memory of the process that timed it (the shared timing host's when ``details.timing_worker``
    is ``host``: shared with the other hosted variants; report.json's ``timing_memory`` counts it once)."""
    on_device_only: bool = False
    """The runtime checks numbers on this host but cannot time the real thing (e.g. NNAPI)."""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    fidelity: dict[str, Any] | None = None
    """The file vs the module it was exported from, as the build checked it (reported inside ``verdict``)."""

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def fail(self, outcome: Outcome, stage: str, message: str) -> None:
        self.outcome, self.stage = outcome, stage
        self.note(f"{outcome} in {stage}: {message}")

    @property
    def latency_ms_p50(self) -> float | None:
        return self.latency.get("latency_ms_p50")

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in VARIANT_JSON_SKIPS}
        data["outcome"] = str(self.outcome)
        data.update(self.latency)
        if self.speedup:
            data["speedup_vs_reference"] = self.speedup["ratio"]
        data.update({k: v for k, v in self.details.items() if k not in data})
        return _finite(data)


def _finite(value: Any) -> Any:
    """JSON has no inf or NaN: they become null (the accompanying fields say why)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
