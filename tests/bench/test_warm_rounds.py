"""Every interleaved round starts with an untimed warm-up that lasts both a number of runs and a time."""

from __future__ import annotations

import time

from mobilize.bench.harness import warm_round, warm_up
from mobilize.bench.rounds import interleaved


def _recorder():
    calls = []

    def fn(_native):
        calls.append(time.perf_counter())

    return fn, calls


def test_the_warm_up_lasts_its_runs_and_its_time():
    fn, calls = _recorder()
    start = time.perf_counter()
    runs = warm_up(fn, None, runs=3, seconds=0.03)
    # a fast function: the time decides (measured on return: the loop checks the clock after each run, so its last
    # run may start a hair before 0.03 s, seen 0.02999995)
    assert runs == len(calls) >= 3 and time.perf_counter() - start >= 0.03
    fn, calls = _recorder()
    assert warm_up(lambda _: (fn(None), time.sleep(0.02)), None, runs=4, seconds=0.0) == 4 == len(calls)


def test_a_round_times_only_its_iterations_after_the_warm_up():
    fn, calls = _recorder()
    times, total = warm_round(fn, None, 5, runs=2, seconds=0.01)
    assert len(times) == 5 and len(calls) >= 2 + 5 and total >= sum(times)


def test_in_process_rounds_warm_every_round():
    fn, calls = _recorder()
    stats = interleaved({"a": (fn, None)}, rounds=3, iterations=4, warmup=0)
    assert stats["a"].iterations == 12
    assert len(calls) >= 12 + 3 * 3  # three rounds, each with at least ROUND_WARMUP_RUNS untimed runs
