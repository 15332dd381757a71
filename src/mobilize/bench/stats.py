"""Latency statistics with units in every field name.

    >>> s = BenchStats.from_times_ns([1_000_000, 2_000_000, 3_000_000], total_ns=6_000_000)
    >>> s.latency_ms_p50, s.iters_per_s
    (2.0, 500.0)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of already sorted values."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclasses.dataclass
class BenchStats:
    iterations: int
    latency_ms_mean: float
    latency_ms_p10: float
    latency_ms_p50: float
    latency_ms_p90: float
    latency_ms_p99: float
    latency_ms_min: float
    latency_ms_max: float
    latency_ms_std: float
    iters_per_s: float
    us_per_iter: float
    """Wall time of the whole timed loop over iterations (speed_benchmark_torch's figure)."""

    @classmethod
    def from_times_ns(cls, times_ns: Sequence[int], total_ns: int) -> "BenchStats":
        ms = sorted(t / 1e6 for t in times_ns)
        n = len(ms)
        us_per_iter = total_ns / 1e3 / n
        return cls(
            iterations=n,
            latency_ms_mean=statistics.fmean(ms),
            latency_ms_p10=percentile(ms, 10),
            latency_ms_p50=percentile(ms, 50),
            latency_ms_p90=percentile(ms, 90),
            latency_ms_p99=percentile(ms, 99),
            latency_ms_min=ms[0],
            latency_ms_max=ms[-1],
            latency_ms_std=statistics.pstdev(ms) if n > 1 else 0.0,
            iters_per_s=1e6 / us_per_iter,
            us_per_iter=us_per_iter,
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
