"""Racing: timed rounds go on among the variants that could still be the fastest, until one separates.

Every variant runs the first ``min_rounds`` interleaved rounds.  From then on, after each round, the
**leader** is the candidate fastest on the paired estimator below (:func:`paired_leader`), and every other candidate
is compared with it on the paired rounds by **one estimator**: the geometric mean of the per-round ratios
(other / leader, same round, so the same machine state) with the Student t interval on their logarithms
(:func:`mobilize.accuracy.stats.ratio_ci`; the point estimate is the interval's centre, so it always lies
inside it; from 8 paired rounds a round whose ratio lies far off the others' is left out and named, so one stalled
round cannot turn a win into a tie), at the level of that look (below).  A candidate whose interval excludes 1 (the leader is faster
beyond noise) is dropped, with the round, the level and the numbers that decided it.  The race stops when the leader has separated from every other
candidate, or when the next round would overrun the time budget; then the candidates left are a **tie**.
Variants that are not candidates (not OK, e.g. over the accuracy budget) are timed in the first rounds for
the table, then dropped for that reason.

The intervals are looked at after every round, so the race corrects for the repeated looks by **alpha
spending**: look k (k = 1 at round ``min_rounds``, then one per round) uses the interval at level
1 - alpha_k with alpha_k = alpha * 6 / (pi^2 k^2), alpha = 0.05.  Those alphas sum to less than alpha over any
number of looks (sum 1/k^2 = pi^2/6), so the chance that a candidate no slower than the leader is ever
dropped by chance stays within 5% however long the race runs, and the race needs no planned number of looks
(the time budget decides it).  The first look is at 97.0%, the second 99.2%, the fifth 99.9%: a real
difference separates at the first looks, a small one takes more rounds or ends in a tie.  report.json's
``racing`` block keeps the ``correction`` and the level of every look.

    >>> times = iter([0.0] + [float(i) for i in range(1, 100)])
    >>> race = Race(["a", "b"], candidates=["a", "b"], min_rounds=3, time_budget_s=60, clock=lambda: next(times))
    >>> for r in range(6):
    ...     alive = race.after_round(r, {"a": [1.0, 1.02, 0.99, 1.01, 1.0, 0.98][: r + 1],
    ...                                  "b": [2.0, 2.1, 1.9, 2.05, 2.0, 1.95][: r + 1]})
    ...     if not alive: break
    >>> race.record.stopped, race.record.leader, race.record.rounds, race.record.dropped[0].name
    ('separated', 'a', 3, 'b')
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from mobilize.accuracy.stats import RatioCI, ratio_ci

ESTIMATOR = ("geometric mean of paired per-round ratios (same round, other / leader) with the Student t "
             "interval on their logarithms (95%; in the race, at each look's corrected level); from 8 paired rounds, "
             "a round whose ratio lies more than 6 robust deviations and 1.5x off the median ratio is left out and "
             "named (at most one in ten)")
"""The one estimator behind every speed ratio and interval compare reports."""

ALPHA = 0.05
"""The race's total error rate, spent over its looks (:func:`look_level`)."""

CORRECTION = ("alpha spending over the looks: look k (one per round from min_rounds on) uses the interval at level "
              "1 - 0.05 * 6 / (pi^2 k^2); the levels' alphas sum to under 0.05 over any number of looks")
"""How the race corrects for looking at the intervals after every round (report.json ``racing.correction``)."""


def look_level(k: int, alpha: float = ALPHA) -> float:
    """The interval level of the race's look ``k`` (1-based): 1 - alpha * 6 / (pi^2 k^2).

    >>> [round(look_level(k), 4) for k in (1, 2, 5)], round(sum(1 - look_level(k) for k in range(1, 10000)), 4)
    ([0.9696, 0.9924, 0.9988], 0.05)
    """
    return 1.0 - alpha * 6.0 / (math.pi ** 2 * k * k)


def level_text(level: float) -> str:
    """``97.0%``, ``99.24%``: enough digits to tell the looks apart, and never rounded up to 100% (after many looks
    a look's level is 99.99...%, which ``100.000%`` misstates).

        >>> level_text(0.97), level_text(0.99241), level_text(0.99999962), level_text(1 - 1e-12)
        ('97.0%', '99.24%', '99.99996%', '>99.999999%')
    """
    digits = 1 if level < 0.99 else 2 if level < 0.999 else 3
    while digits < 6 and round(100 * level, digits) >= 100:
        digits += 1
    return f"{100 * level:.{digits}f}%" if round(100 * level, digits) < 100 else f">{100 - 10 ** -digits:.{digits}f}%"

DEFAULT_TIME_BUDGET_S = 30.0
"""Seconds for compare's timed rounds, warm-up and the first ``--rounds`` included: on the default plan the
five fixed rounds take about 10 s on a 2-core AMD EPYC and the main job about 3 minutes, so racing adds at
most ~20 s."""


@dataclasses.dataclass(frozen=True)
class Drop:
    """A variant that left the race: after which round, why, by which rule, and the numbers."""

    name: str
    after_round: int
    """1-based: the number of rounds it ran."""
    rule: str
    """``race-separated`` (the leader is faster beyond noise), ``race-not-a-candidate`` (not OK) or
    ``race-failed`` (it stopped answering)."""
    reason: str
    ratio: float | None = None
    """How many times as fast the leader is (the estimator), with its interval below."""
    low: float | None = None
    high: float | None = None
    against: str | None = None
    """The leader of the round it was dropped in (``race-separated``): the leader may change later, so a
    variant dropped early was measured against that leader, not the final one."""
    level: float | None = None
    """The level of the interval that decided it (the look's, :func:`look_level`)."""
    outlier_rounds: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Rounds the estimator left out of that interval (:func:`mobilize.accuracy.stats.outlier_rounds`): round and
    ratio, named in the reason too."""

    def to_json(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in dataclasses.asdict(self).items()}


@dataclasses.dataclass
class RaceRecord:
    """What report.json keeps of the race (``racing``)."""

    min_rounds: int
    time_budget_s: float
    estimator: str = ESTIMATOR
    rounds: int = 0
    """Rounds run in total (the fixed ones included)."""
    elapsed_s: float = 0.0
    stopped: str = "running"
    """``separated`` (one candidate left), ``time-budget`` (the candidates left are a tie), ``alone`` (one
    candidate from the start), ``no-candidates``, or ``running`` while it runs."""
    leader: str | None = None
    contenders: list[str] = dataclasses.field(default_factory=list)
    """Candidates still racing when it stopped (the leader first): more than one is a tie."""
    dropped: list[Drop] = dataclasses.field(default_factory=list)
    correction: str = CORRECTION
    looks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Every look at the intervals: after which round (1-based) and at which level."""

    @property
    def last_level(self) -> float:
        """The level of the last look (95% when there was none): a tie is judged at it."""
        return self.looks[-1]["level"] if self.looks else 1 - ALPHA

    @property
    def tied(self) -> list[str]:
        return [n for n in self.contenders if n != self.leader] if self.stopped == "time-budget" else []

    def spent(self) -> str:
        """How long the rounds took against the budget; the first ``min_rounds`` run whatever the budget, so on a
        slow or busy machine they alone may take longer than it (then said so, not "380 s of 30 s")."""
        if self.elapsed_s > self.time_budget_s:
            return (f"{self.elapsed_s:.0f} s: the {self.min_rounds} rounds every variant runs took longer than the "
                    f"{self.time_budget_s:g} s racing budget")
        return f"{self.elapsed_s:.0f} s of the {self.time_budget_s:g} s time budget"

    def summary(self) -> str:
        """One line for the terminal."""
        if self.stopped == "no-candidates":
            return f"racing: none (no OK variant was timed; {self.rounds} round(s) for the table)"
        if self.stopped == "running":
            return f"racing: stopped early after {self.rounds} round(s)"
        separated = sum(d.rule == "race-separated" for d in self.dropped)
        looks = f" ({len(self.looks)} look(s), each at its alpha-spent level)" if self.looks else ""
        head = (f"racing: {self.rounds} rounds in {self.spent()}; "
                f"{separated} dropped as slower beyond noise{looks}")
        other = len(self.dropped) - separated
        if other:
            head += f", {other} not raced (not OK or failed)"
        if self.stopped == "separated":
            return f"{head}; {self.leader} separated from every other OK variant"
        if self.stopped == "alone":
            return f"{head}; {self.leader} was the only OK variant timed"
        return f"{head}; time budget spent with {', '.join(self.contenders)} within noise: a tie"

    @classmethod
    def summary_of(cls, data: Mapping[str, Any]) -> str:
        """:meth:`summary` of a record read back from report.json."""
        fields = {f.name for f in dataclasses.fields(cls)}
        record = cls(**{k: v for k, v in data.items() if k in fields and k not in ("dropped", "looks")})
        record.dropped = [Drop(**d) for d in data.get("dropped", [])]
        record.looks = list(data.get("looks") or [])
        return record.summary()

    def to_json(self) -> dict[str, Any]:
        return {"estimator": self.estimator, "min_rounds": self.min_rounds, "time_budget_s": self.time_budget_s,
                "rounds": self.rounds, "elapsed_s": round(self.elapsed_s, 3), "stopped": self.stopped,
                "leader": self.leader, "contenders": list(self.contenders), "tied": self.tied,
                "dropped": [d.to_json() for d in self.dropped], "correction": self.correction,
                "looks": list(self.looks)}


def geometric_mean(values: Sequence[float]) -> float:
    good = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, good)) / len(good)) if good else math.inf


class Race:
    """Decides after every round which variants run the next one (:func:`mobilize.bench.rounds.schedule`)."""

    def __init__(self, names: Iterable[str], candidates: Iterable[str], min_rounds: int, time_budget_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self.names = list(names)
        self.candidates = [n for n in self.names if n in set(candidates)]
        self.clock = clock
        self.start = clock()
        self.last = self.start
        self.record = RaceRecord(min_rounds=max(1, min_rounds), time_budget_s=time_budget_s)
        self.alive = list(self.names)

    def after_round(self, index: int, round_medians_ms: Mapping[str, Sequence[float]]) -> list[str]:
        """``index``: the round just run (0-based); ``round_medians_ms``: every variant's round medians so far
        (a variant missing from it stopped answering).  Returns who runs the next round (empty: stop)."""
        rec = self.record
        now = self.clock()
        round_s, self.last = now - self.last, now
        rec.rounds, rec.elapsed_s = index + 1, now - self.start
        for name in [n for n in self.alive if n not in round_medians_ms]:
            self._drop(name, "race-failed", "stopped answering in a timed round (see its notes)")
        if rec.rounds < rec.min_rounds:
            return list(self.alive)
        for name in [n for n in self.alive if n not in self.candidates]:
            self._drop(name, "race-not-a-candidate", "not OK: timed for the table, not raced")
        racing = [n for n in self.alive if n in self.candidates]
        if not racing:
            return self._stop("no-candidates", [])
        leader = paired_leader(racing, round_medians_ms)
        rec.leader = leader
        if len(racing) == 1:
            return self._stop("separated" if rec.dropped and any(d.rule == "race-separated" for d in rec.dropped)
                              else "alone", [leader])
        level = look_level(len(rec.looks) + 1)
        rec.looks.append({"round": rec.rounds, "level": level})
        for name in racing:
            if name == leader:
                continue
            ci = ratio_ci(round_medians_ms[name], round_medians_ms[leader], level)
            if ci.significant and ci.ratio > 1:
                self._drop(name, "race-separated", _slower(leader, ci, rec.rounds, level), ci, against=leader,
                           level=level)
        racing = [n for n in self.alive if n in self.candidates]
        racing.sort(key=lambda n: n != leader)
        if len(racing) == 1:
            return self._stop("separated", racing)
        if rec.elapsed_s + round_s > rec.time_budget_s:  # the next round would overrun: stop within budget
            return self._stop("time-budget", racing)
        return list(self.alive)

    def _drop(self, name: str, rule: str, reason: str, ci: RatioCI | None = None, against: str | None = None,
              level: float | None = None) -> None:
        self.alive.remove(name)
        self.record.dropped.append(Drop(name, self.record.rounds, rule, reason,
                                        *((ci.ratio, ci.low, ci.high) if ci else (None, None, None)), against, level,
                                        ci.to_json()["outlier_rounds"] if ci else []))

    def _stop(self, why: str, contenders: list[str]) -> list[str]:
        self.record.stopped, self.record.contenders = why, contenders
        self.alive = []
        return []


def paired_leader(racing: Sequence[str], round_medians_ms: Mapping[str, Sequence[float]]) -> str:
    """The candidate faster than the others on the estimator: each one's paired ratio (outlier rounds left out)
    against the one with the lowest geometric mean, the lowest ratio leading.  One slow round lifts a file's
    geometric mean (847 ms in 8 rounds of 15.8 ms: 1.6x) but not its paired ratio, so it cannot cost the lead."""
    first = min(racing, key=lambda n: geometric_mean(round_medians_ms[n]))
    return min(racing, key=lambda n: 1.0 if n == first else ratio_ci(round_medians_ms[n],
                                                                     round_medians_ms[first]).ratio)


def _slower(leader: str, ci: RatioCI, rounds: int, level: float) -> str:
    return (f"{leader} is {ci.ratio:.2f}x as fast ({level_text(level)} CI {ci.low:.2f}-{ci.high:.2f}, excludes 1, "
            f"the level of this look) after {rounds} paired rounds{ci.outlier_text()}")
