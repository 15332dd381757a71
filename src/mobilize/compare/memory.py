"""The timing workers' memory in a compare run: every process that serves timed rounds, counted once each
(the shared timing host serves several variants).

Two figures, read from ``/proc`` after every round: ``peak_mb`` is the sum of each process's own peak
(``VmHWM``): they are all alive together through the rounds, so this bounds their combined peak from above (their
peaks need not coincide); ``sampled_max_mb`` is the largest sum of their resident memory now (``VmRSS``) seen after
a round, a lower bound.

    >>> TimingMemory().to_json()["processes"]
    []
"""

from __future__ import annotations

from typing import Any

HOW = ("peak_mb: the sum of each timing process's own peak resident memory (VmHWM), all alive together through "
       "the timed rounds (an upper bound on their combined peak); sampled_max_mb: the largest sum of their current "
       "resident memory (VmRSS) read after a round")


class TimingMemory:
    def __init__(self) -> None:
        self.sampled_max_mb = 0.0
        self.processes: dict[int, dict[str, Any]] = {}

    def sample(self, workers: dict[str, Any]) -> None:
        """``workers``: variant name -> its timing worker (anything with ``child``, a :class:`mobilize.pipeline.process.Child`)."""
        now = 0.0
        seen: set[int] = set()
        for name, w in workers.items():
            pid = w.child.process.pid
            entry = self.processes.setdefault(pid, {"variants": [], "peak_rss_mb": 0.0})
            if name not in entry["variants"]:
                entry["variants"].append(name)
            if pid not in seen:
                seen.add(pid)
                now += w.child.rss_mb()
                entry["peak_rss_mb"] = max(entry["peak_rss_mb"], w.child.peak_rss_mb())
        self.sampled_max_mb = max(self.sampled_max_mb, now)

    @property
    def peak_mb(self) -> float:
        return sum(p["peak_rss_mb"] for p in self.processes.values())

    def to_json(self) -> dict[str, Any]:
        return {"peak_mb": round(self.peak_mb, 1), "sampled_max_mb": round(self.sampled_max_mb, 1),
                "processes": [{"variants": p["variants"], "peak_rss_mb": round(p["peak_rss_mb"], 1)}
                              for p in self.processes.values()], "how": HOW}
