"""Confidence intervals a reviewer accepts: paired bootstrap for accuracy, paired rounds for speed.

The same samples go through every variant, so an accuracy difference is judged on the paired
per-sample outcomes (bootstrap over samples; exact McNemar p-value beside it).  The same rounds
time every variant, so a speed ratio is judged on the per-round ratios (t interval on their
logarithms; the point estimate is their geometric mean, so it always lies inside its own interval).  An
interval that contains "no difference" is a **tie**.  The quantiles, the exact binomial test and the
bootstrap are scipy.stats' (scipy comes with scikit-learn).

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


def t95(df: int) -> float:
    """Two-sided 95% Student t quantile."""
    return t_quantile(df, CONFIDENCE)


def t_quantile(df: int, level: float = CONFIDENCE) -> float:
    """Two-sided Student t quantile at ``level`` (0.95: the 95% interval's)."""
    from scipy import stats

    return float(stats.t.ppf(1 - (1 - level) / 2, df))


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
    return _bootstrap_mean(diff * 100.0, resamples, seed)


def mcnemar_p(reference_correct: Sequence[bool], candidate_correct: Sequence[bool]) -> float:
    """Exact two-sided McNemar p-value on the discordant pairs."""
    from scipy import stats

    b = sum(1 for r, c in zip(reference_correct, candidate_correct) if r and not c)
    c = sum(1 for r, c2 in zip(reference_correct, candidate_correct) if c2 and not r)
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(min(b, c), b + c, 0.5).pvalue)


def mean_ci(values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of a mean (e.g. per-sample cosine)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return (math.nan, math.nan)
    if np.all(v == v[0]):
        return (float(v[0]), float(v[0]))
    return _bootstrap_mean(v, resamples, seed)


def weighted_mean_ci(values: Sequence[float], weights: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of a weighted mean sum(w*v)/sum(w), resampling (value, weight) pairs: a ratio over
    all items (detection's F1 over all boxes, each image weighing its boxes) and its interval from one estimator.
    A resample of weight 0 only counts as the plain mean of its values."""
    import numpy as np
    from scipy import stats

    v, w = np.asarray(values, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    if len(v) == 0 or not w.sum() > 0:
        return (math.nan, math.nan)
    if np.all(v[w > 0] == v[w > 0][0]):
        return (float(v[w > 0][0]),) * 2

    def weighted(values, weights, axis=-1):
        total = weights.sum(axis)
        return np.where(total > 0, (values * weights).sum(axis) / np.where(total > 0, total, 1.0), values.mean(axis))

    result = stats.bootstrap((v, w), weighted, paired=True, n_resamples=resamples, confidence_level=CONFIDENCE,
                             method="percentile", rng=np.random.default_rng(seed), vectorized=True)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _bootstrap_mean(values, resamples: int, seed: int) -> tuple[float, float]:
    """Percentile bootstrap interval of a mean (scipy.stats.bootstrap)."""
    import numpy as np
    from scipy import stats

    result = stats.bootstrap((values,), np.mean, n_resamples=resamples, confidence_level=CONFIDENCE,
                             method="percentile", rng=np.random.default_rng(seed), vectorized=True)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


@dataclasses.dataclass(frozen=True)
class RatioCI:
    """How many times faster B is than A (A's time / B's time), from paired round medians: the geometric mean of
    the per-round ratios and its t interval (one estimator for both)."""

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


def ratio_ci(a_round_ms: Sequence[float], b_round_ms: Sequence[float], level: float = CONFIDENCE) -> RatioCI:
    """Per-round ratios a/b (same round, so the same machine state); t interval on their logs at ``level``."""
    pairs = [(a, b) for a, b in zip(a_round_ms, b_round_ms) if a > 0 and b > 0]
    if not pairs:
        return RatioCI(math.nan, math.nan, math.nan, 0)
    logs = [math.log(a / b) for a, b in pairs]
    center = statistics.fmean(logs)
    ratio = math.exp(center)
    if len(logs) < 2:
        return RatioCI(ratio, 0.0, math.inf, len(logs))
    half = t_quantile(len(logs) - 1, level) * statistics.stdev(logs) / math.sqrt(len(logs))
    return RatioCI(ratio, math.exp(center - half), math.exp(center + half), len(logs))


def spread_percent(round_medians_ms: Sequence[float]) -> float | None:
    """(max - min) / median of the round medians, in percent: how much rounds disagreed."""
    if len(round_medians_ms) < 2:
        return None
    med = statistics.median(round_medians_ms)
    return 100.0 * (max(round_medians_ms) - min(round_medians_ms)) / med if med > 0 else None
