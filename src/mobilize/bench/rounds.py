"""Interleaved rounds: every variant runs a short round in turn, so drift hits all equally.

The one implementation of the schedule (warm-up, rotating order, pooled times, round medians)
for in-process callables (``interleaved``) and for compare's worker processes (``schedule`` with
a function that times one round wherever the variant lives).
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import TYPE_CHECKING, Any, Callable, Iterable

from mobilize.bench.harness import warm_round
from mobilize.bench.stats import BenchStats

if TYPE_CHECKING:
    from mobilize.bench.racing import Race

# No pause between rounds: idle runtimes' thread pools (ONNX Runtime, XNNPACK, OpenMP) spin for a few milliseconds
# after a run, but the next round's untimed warm-up (:data:`mobilize.bench.harness.ROUND_WARMUP_S`) outlasts
# them, while a pause let the machine idle, which slowed the next round's start (measured: 50 ms pauses made
# LiteRT read 1.5x slower than back-to-back rounds; 300 ms, 1.9x).


@dataclasses.dataclass
class RoundTimes:
    times_ns: list[int] = dataclasses.field(default_factory=list)
    total_ns: int = 0
    round_medians_ms: list[float] = dataclasses.field(default_factory=list)

    def stats(self) -> BenchStats:
        return BenchStats.from_times_ns(self.times_ns, self.total_ns)


RunRound = Callable[[str, int], "tuple[list[int], int] | None"]
"""Time ``n`` iterations of the named variant: (per-iteration ns, loop ns), or None if it dropped out."""


def schedule(names: Iterable[str], run_round: RunRound, rounds: int, iterations: int | Callable[[str], int],
             warmup: int = 3, after_round: Callable[[int], None] | None = None,
             race: Race | None = None) -> dict[str, RoundTimes]:
    """Warm every variant, then ``rounds`` rounds visiting each in turn (the order rotates each round).

    With a ``race`` (:class:`mobilize.bench.racing.Race`) the race decides after each round who runs the next
    one and when to stop; ``rounds`` is then its business (its ``min_rounds``)."""
    names = list(names)
    per = iterations if callable(iterations) else (lambda _name: iterations)
    alive = [n for n in names if warmup <= 0 or run_round(n, warmup) is not None]
    out = {n: RoundTimes() for n in names}
    r = -1
    while alive and (race is not None or r + 1 < rounds):
        r += 1
        order = alive[r % len(alive):] + alive[: r % len(alive)]
        for name in order:
            got = run_round(name, per(name))
            if got is None:
                alive.remove(name)
                continue
            times, total = got
            out[name].times_ns.extend(times)
            out[name].total_ns += total
            out[name].round_medians_ms.append(statistics.median(times) / 1e6)
        if after_round:
            after_round(r)
        if race is not None:
            keep = set(race.after_round(r, {n: out[n].round_medians_ms for n in alive}))
            alive = [n for n in alive if n in keep]
    return out


def interleaved(variants: dict[str, tuple[Callable[[Any], Any], Any]], rounds: int = 5, iterations: int = 20,
                warmup: int = 3, iterations_for: dict[str, int] | None = None) -> dict[str, BenchStats]:
    """In-process variants: ``name -> (fn, prepared inputs)``; stats pool every timed iteration."""

    def run_round(name: str, n: int) -> tuple[list[int], int]:
        fn, native = variants[name]
        return warm_round(fn, native, n)

    rounds_out = schedule(variants, run_round, rounds, lambda n: (iterations_for or {}).get(n, iterations), warmup)
    return {n: r.stats() for n, r in rounds_out.items()}
