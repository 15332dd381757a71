"""Interleaved rounds: every variant runs a short round in turn, so drift hits all equally.

    >>> from mobilize.bench.rounds import interleaved
    >>> result = interleaved({"a": (fn_a, inputs_a), "b": (fn_b, inputs_b)}, rounds=5, iterations=20)
    >>> result["a"].latency_ms_p50, result["a"].iterations
    (4.1, 100)
"""

from __future__ import annotations

from typing import Any, Callable

from mobilize.bench.harness import timed_loop
from mobilize.bench.stats import BenchStats


def interleaved(variants: dict[str, tuple[Callable[[Any], Any], Any]], rounds: int = 5, iterations: int = 20,
                warmup: int = 3, iterations_for: dict[str, int] | None = None) -> dict[str, BenchStats]:
    """Warm each variant, then ``rounds`` rounds visiting every variant in turn (order rotates
    each round).  Stats pool every timed iteration of a variant."""
    names = list(variants)
    for name in names:
        fn, native = variants[name]
        for _ in range(warmup):
            fn(native)
    times: dict[str, list[int]] = {n: [] for n in names}
    totals: dict[str, int] = {n: 0 for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            fn, native = variants[name]
            n = (iterations_for or {}).get(name, iterations)
            t, total = timed_loop(fn, native, n)
            times[name].extend(t)
            totals[name] += total
    return {n: BenchStats.from_times_ns(times[n], totals[n]) for n in names}
