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


OUTLIER_MIN_ROUNDS = 8
"""Paired rounds before one may be left out as an outlier (:func:`outlier_rounds`): fewer, and no round is."""

OUTLIER_Z = 6.0
"""How far from the median per-round log-ratio a round must lie, in robust standard deviations (1.4826 x the
median absolute deviation), to be left out."""

OUTLIER_MIN_FACTOR = 1.5
"""...and by at least this factor: a round's ratio 1.5x off the median ratio (ordinary round-to-round noise on a
shared 2-core VM stays within ~1.3x), so a near-constant series never loses rounds to a tiny MAD."""


@dataclasses.dataclass(frozen=True)
class RatioCI:
    """How many times faster B is than A (A's time / B's time), from paired round medians: the geometric mean of
    the per-round ratios and its t interval (one estimator for both), outlier rounds left out and named."""

    ratio: float
    low: float
    high: float
    rounds: int
    """Paired rounds the ratio and interval rest on (the outliers not counted)."""
    outliers: tuple[tuple[int, float], ...] = ()
    """Rounds left out (:func:`outlier_rounds`): (1-based round, that round's ratio A/B)."""

    @property
    def significant(self) -> bool:
        """The interval excludes 1.0 (no difference): otherwise it is a tie."""
        return self.rounds >= 2 and (self.low > 1.0 or self.high < 1.0)

    def to_json(self) -> dict[str, float | int | bool | list]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "rounds": self.rounds,
                "significant": self.significant,
                "outlier_rounds": [{"round": k, "ratio": r} for k, r in self.outliers]}

    def outlier_text(self) -> str:
        """``; round 31 (ratio 0.02 that round, 1.19 over the rest) left out as an outlier, ... [rule
        ratio-outlier-round]``, or nothing."""
        if not self.outliers:
            return ""
        rounds = ", ".join(f"round {k} (ratio {r:.2f} that round, {self.ratio:.2f} over the rest)"
                           for k, r in self.outliers)
        return (f"; {rounds} left out as an outlier, more than {OUTLIER_Z:g} robust deviations and "
                f"{OUTLIER_MIN_FACTOR:g}x off the median ratio [rule ratio-outlier-round]")


def outlier_rounds(logs: Sequence[float]) -> list[int]:
    """Positions of the per-round log-ratios one round's accident made (a stall, a page-in, a re-optimisation), left
    out of :func:`ratio_ci`: with at least :data:`OUTLIER_MIN_ROUNDS` rounds, those more than :data:`OUTLIER_Z`
    robust deviations and :data:`OUTLIER_MIN_FACTOR` off the median, the farthest first, at most one in ten rounds
    (one from 8 rounds).  Symmetric: a round that flatters either file is left out as surely as one that hurts it.
    (Issue #67: torchscript-frozen beat fused in 51 of 52 paired rounds; one 847 ms round, its median 15.8 ms, swung
    the t interval to 0.82-1.88, a tie.)

    >>> import math
    >>> logs = [math.log(1.2 + 0.01 * (i % 3)) for i in range(52)]
    >>> logs[30] = math.log(20.0 / 847.0)
    >>> outlier_rounds(logs), outlier_rounds(logs[:7]), outlier_rounds([0.0] * 8 + [0.1])
    ([30], [], [])
    """
    n = len(logs)
    if n < OUTLIER_MIN_ROUNDS:
        return []
    med = statistics.median(logs)
    scale = 1.4826 * statistics.median(abs(v - med) for v in logs)
    edge = max(OUTLIER_Z * scale, math.log(OUTLIER_MIN_FACTOR))
    far = sorted((i for i, v in enumerate(logs) if abs(v - med) > edge), key=lambda i: -abs(logs[i] - med))
    return sorted(far[:max(1, n // 10)])


def ratio_ci(a_round_ms: Sequence[float], b_round_ms: Sequence[float], level: float = CONFIDENCE) -> RatioCI:
    """Per-round ratios a/b (same round, so the same machine state); t interval on their logs at ``level``, the
    rounds :func:`outlier_rounds` finds left out (one round cannot swing it) and named."""
    pairs = [(k, a, b) for k, (a, b) in enumerate(zip(a_round_ms, b_round_ms), 1) if a > 0 and b > 0]
    if not pairs:
        return RatioCI(math.nan, math.nan, math.nan, 0)
    every = [math.log(a / b) for _, a, b in pairs]
    out = set(outlier_rounds(every))
    logs = [v for i, v in enumerate(every) if i not in out]
    outliers = tuple((pairs[i][0], math.exp(every[i])) for i in sorted(out))
    center = statistics.fmean(logs)
    ratio = math.exp(center)
    if len(logs) < 2:
        return RatioCI(ratio, 0.0, math.inf, len(logs), outliers)
    half = t_quantile(len(logs) - 1, level) * statistics.stdev(logs) / math.sqrt(len(logs))
    return RatioCI(ratio, math.exp(center - half), math.exp(center + half), len(logs), outliers)


def spread_percent(round_medians_ms: Sequence[float]) -> float | None:
    """(max - min) / median of the round medians, in percent: how much rounds disagreed."""
    if len(round_medians_ms) < 2:
        return None
    med = statistics.median(round_medians_ms)
    return 100.0 * (max(round_medians_ms) - min(round_medians_ms)) / med if med > 0 else None
