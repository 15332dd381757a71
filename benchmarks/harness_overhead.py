"""How much does mobilize's harness add to what it measures?

For a sub-millisecond model and for MobileNetV2, interleaved rounds time the same Session
two ways: the harness (per-iteration clock reads, as `mobilize bench` does) and a bare loop
(one clock read around N calls), in adjacent pairs whose order alternates.  Prints the harness's median and mean per iteration beside
the bare loop's mean, and the overhead as a ratio measured in this one run (target: <= 2%).

    .venv/bin/python benchmarks/harness_overhead.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from mobilize.bench.harness import timed_loop
from mobilize.bench.stats import BenchStats
from mobilize.runtimes.base import open_session
from mobilize.core.inputs import make_random_inputs
from mobilize.sources.models import resolve_model


def bare_loop_us(fn, native, iterations: int) -> float:
    clock = time.perf_counter_ns
    start = clock()
    for _ in range(iterations):
        fn(native)
    return (clock() - start) / 1e3 / iterations


def measure(reference: str, input_shape: tuple[int, ...] | None, iterations: int, rounds: int, threads: int) -> dict:
    source = resolve_model(reference)
    session = open_session(source, threads=threads)
    specs = source.input_specs
    if input_shape:
        specs = [type(specs[0])(input_shape)]
    native = session.prepare(make_random_inputs(specs))
    for _ in range(max(10, iterations // 10)):
        session.run_prepared(native)
    harness_p50, harness_mean, bare, ratios = [], [], [], []
    for r in range(rounds):
        # Alternate which loop goes first, so drift and cache state hit both equally.
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            if which == 0:
                times, total = timed_loop(session.run_prepared, native, iterations)
                stats = BenchStats.from_times_ns(times, total)
                harness_p50.append(stats.latency_ms_p50 * 1e3)
                harness_mean.append(stats.us_per_iter)
            else:
                bare.append(bare_loop_us(session.run_prepared, native, iterations))
        ratios.append(harness_mean[-1] / bare[-1])
    session.close()
    return {
        "model": reference + (f" {','.join(map(str, input_shape))}" if input_shape else ""),
        "harness_p50_us": statistics.median(harness_p50),
        "harness_us_per_iter": statistics.median(harness_mean),
        "bare_us_per_iter": statistics.median(bare),
        "overhead": statistics.median(ratios) - 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cases = [("zoo:conv_bn_relu", (1, 3, 32, 32), 300), ("zoo:mobilenet_v2", None, 10)]
    print(f"{'model':<34} {'harness p50 us':>15} {'harness mean us':>16} {'bare loop us':>13} {'overhead':>9}")
    worst = float("-inf")
    for reference, shape, iterations in cases:
        r = measure(reference, shape, iterations, args.rounds, args.threads)
        overhead = r["overhead"]
        worst = max(worst, overhead)
        print(f"{r['model']:<34} {r['harness_p50_us']:>15.2f} {r['harness_us_per_iter']:>16.2f} "
              f"{r['bare_us_per_iter']:>13.2f} {overhead:>+9.2%}")
    print("overhead = median over rounds of (harness mean / adjacent bare-loop mean) - 1")
    print(f"worst overhead: {worst:+.2%}  target <= +2%: "
          f"{'PASS' if worst <= 0.02 else 'FAIL'}")
    print("(the harness median is at or below its mean: per-iteration medians drop the slow outliers)")


if __name__ == "__main__":
    main()
