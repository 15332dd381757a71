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


class _Clock:
    """``time`` for the harness, whose ``perf_counter`` moves ``step_s`` at every read: the loop's decisions on given
    times, not on the machine's pace."""

    perf_counter_ns = staticmethod(time.perf_counter_ns)

    def __init__(self, step_s: float):
        self.now, self.step_s = 0.0, step_s

    def perf_counter(self) -> float:
        self.now += self.step_s
        return self.now


def test_the_warm_up_lasts_its_runs_and_its_time(monkeypatch):
    from mobilize.bench import harness

    fn, calls = _recorder()
    monkeypatch.setattr(harness, "time", _Clock(0.01))
    # the end is 0.04 (read at 0.01, plus 0.03): 3 runs, then the clock reads 0.02 and 0.03 (two more), then 0.04
    assert warm_up(fn, None, runs=3, seconds=0.03) == 5 == len(calls)
    fn, calls = _recorder()
    assert warm_up(fn, None, runs=4, seconds=0.0) == 4 == len(calls)  # no time asked: the runs decide


def test_a_round_times_only_its_iterations_after_the_warm_up():
    fn, calls = _recorder()
    times, total = warm_round(fn, None, 5, runs=2, seconds=0.01)
    assert len(times) == 5 and len(calls) >= 2 + 5 and total >= sum(times)


def test_in_process_rounds_warm_every_round():
    fn, calls = _recorder()
    stats = interleaved({"a": (fn, None)}, rounds=3, iterations=4, warmup=0)
    assert stats["a"].iterations == 12
    assert len(calls) >= 12 + 3 * 3  # three rounds, each with at least ROUND_WARMUP_RUNS untimed runs
