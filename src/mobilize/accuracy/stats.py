"""Confidence intervals a reviewer accepts: paired bootstrap for accuracy, paired rounds for speed.

The same samples go through every variant, so an accuracy difference is judged on the paired
per-sample outcomes (bootstrap over samples; exact McNemar p-value beside it).  The same rounds
time every variant, so a speed ratio is judged on the per-round ratios (t interval on their
logarithms).  An interval that contains "no difference" is a **tie**.

    >>> lo, hi = paired_drop_ci([True] * 90 + [False] * 10, [True] * 88 + [False] * 12)
    >>> round(lo, 1) <= 2.0 <= round(hi, 1)
    True
    >>> ratio_ci([10.0, 10.2, 9.9], [5.0, 5.1, 5.0]).significant
    True
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Sequence

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    """Two-sided 95% Student t quantile (table; 1.96 beyond 30 degrees of freedom)."""
    if df in _T95:
        return _T95[df]
    keys = [k for k in sorted(_T95) if k <= df]
    return _T95[keys[-1]] if df <= 30 and keys else 1.96


def paired_drop_ci(reference_correct: Sequence[bool], candidate_correct: Sequence[bool],
                   resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of (reference top-1 - candidate top-1) in points, resampling samples in pairs."""
    import numpy as np

    ref = np.asarray(reference_correct, dtype=np.float64)
    cand = np.asarray(candidate_correct, dtype=np.float64)
    diff = ref - cand
    n = len(diff)
    if n == 0:
        return (math.nan, math.nan)
    if not diff.any():
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    means = diff[idx].mean(axis=1) * 100.0
    alpha = (1 - CONFIDENCE) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def mcnemar_p(reference_correct: Sequence[bool], candidate_correct: Sequence[bool]) -> float:
    """Exact two-sided McNemar p-value on the discordant pairs."""
    b = sum(1 for r, c in zip(reference_correct, candidate_correct) if r and not c)
    c = sum(1 for r, c2 in zip(reference_correct, candidate_correct) if c2 and not r)
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def mean_ci(values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of a mean (e.g. per-sample cosine)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(resamples, len(v)))].mean(axis=1)
    alpha = (1 - CONFIDENCE) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


@dataclasses.dataclass(frozen=True)
class RatioCI:
    """How many times faster B is than A (A's time / B's time), from paired round medians."""

    ratio: float
    low: float
    high: float
    rounds: int

    @property
    def significant(self) -> bool:
        """The interval excludes 1.0 (no difference): otherwise it is a tie."""
        return self.rounds >= 2 and (self.low > 1.0 or self.high < 1.0)

    def to_json(self) -> dict[str, float | int | bool]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "rounds": self.rounds,
                "significant": self.significant}


def ratio_ci(a_round_ms: Sequence[float], b_round_ms: Sequence[float]) -> RatioCI:
    """Per-round ratios a/b (same round, so the same machine state); t interval on their logs."""
    pairs = [(a, b) for a, b in zip(a_round_ms, b_round_ms) if a > 0 and b > 0]
    if not pairs:
        return RatioCI(math.nan, math.nan, math.nan, 0)
    logs = [math.log(a / b) for a, b in pairs]
    center = statistics.fmean(logs)
    ratio = statistics.median(a for a, _ in pairs) / statistics.median(b for _, b in pairs)
    if len(logs) < 2:
        return RatioCI(ratio, 0.0, math.inf, len(logs))
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return RatioCI(ratio, math.exp(center - half), math.exp(center + half), len(logs))


def spread_percent(round_medians_ms: Sequence[float]) -> float | None:
    """(max - min) / median of the round medians, in percent: how much rounds disagreed."""
    if len(round_medians_ms) < 2:
        return None
    med = statistics.median(round_medians_ms)
    return 100.0 * (max(round_medians_ms) - min(round_medians_ms)) / med if med > 0 else None
