"""A busy machine is seen (other processes' CPU time during the rounds) and a race run on it claims no
separation (rule race-busy-machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mobilize.bench.load import BUSY_OTHERS_SHARE, SPEED_SHIFT_LIMIT, LoadWatch, MachineLoad, speed_shift
from mobilize.bench.racing import Race
from mobilize.compare.recommend import recommend
from mobilize.core.outcome import Outcome
from mobilize.report.results import VariantResult

BURN = "import time\nend = time.monotonic() + 2.0\nwhile time.monotonic() < end: pass\n"


@pytest.mark.slow
def test_other_processes_burning_the_cores_make_the_machine_busy():
    """Timing behaviour (slow: it burns every core for 2 s and reads the machine's counters)."""
    cores = os.cpu_count() or 1
    # not our children: started through a shell that exits at once (setsid), so they are "other processes"
    for _ in range(cores):
        subprocess.Popen(["setsid", sys.executable, "-c", BURN], start_new_session=True)
    time.sleep(0.3)
    watch = LoadWatch.start()
    time.sleep(1.2)
    load = watch.stop()
    assert load.others_cpu_share > BUSY_OTHERS_SHARE and load.busy, load
    time.sleep(1.0)


def test_a_quiet_watch_of_our_own_work_is_not_busy():
    watch = LoadWatch.start()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # our own CPU time counts as ours, not as the machine's load
        pass
    load = watch.stop()
    assert load.ours_cpu_share > 0 and 0.0 <= load.others_cpu_share <= 1.0


def _raced(busy: bool):
    a, b = VariantResult("a"), VariantResult("b")
    for r, medians in ((a, [1.0, 1.01, 0.99, 1.0, 1.02]), (b, [2.0, 2.1, 1.9, 2.0, 2.05])):
        r.outcome, r.latency_ms_round_medians = Outcome.OK, medians
        r.latency = {"latency_ms_p50": medians[0]}
    times = iter(float(i) for i in range(100))
    race = Race(["a", "b"], ["a", "b"], min_rounds=5, time_budget_s=60, clock=lambda: next(times))
    for i in range(5):
        race.after_round(i, {"a": a.latency_ms_round_medians[: i + 1], "b": b.latency_ms_round_medians[: i + 1]})
    share = 0.9 if busy else 0.0
    load = MachineLoad(2, 10.0, (3.5, 2.0, 1.0), (4.0, 2.5, 1.2), share, 0.5, 0.0)
    return recommend([a, b], race.record, load)


def test_a_race_on_a_busy_machine_claims_no_separation():
    quiet, busy = _raced(False), _raced(True)
    assert "[rule race-separated]" in quiet["reason"] and not quiet["busy_machine"]
    assert busy["name"] == "a" and busy["busy_machine"]
    assert "[rule race-busy-machine]" in busy["reason"] and "separated" not in busy["reason"].replace(
        "claimed separated", "")
    assert "other processes took 90%" in busy["reason"]


def test_the_machine_changing_speed_mid_race_claims_no_separation():
    """Every file slower together from one round on (seen: round medians doubling from the fourth round on a quiet
    2-core VM, /proc showing nothing): the common per-round factor moves, the race's pick is not claimed separated.
    The figures are run 5 of pick_stability's ten (executorch-int8 and litert-int8, the race picked the one a steady
    loop found 1.27x slower)."""
    from mobilize.bench.load import SPEED_SHIFT_LIMIT, speed_shift

    medians = {"executorch-int8": [0.118, 0.12, 0.267, 0.273, 0.266, 0.259, 0.278],
               "litert-int8": [0.154, 0.149, 0.153, 0.251, 0.25, 0.257, 0.257],
               "onnx-fp32": [0.17, 0.169, 0.169, 0.362, 0.362],
               "openvino-int8": [0.182, 0.181, 0.181, 0.337, 0.331]}
    assert speed_shift(medians) > SPEED_SHIFT_LIMIT
    steady = {n: [m[0] * (1 + 0.03 * ((i % 3) - 1)) for i in range(len(m))] for n, m in medians.items()}
    assert speed_shift(steady) < 1.1
    load = MachineLoad(2, 10.0, (1.3, 1.3, 1.5), (1.4, 1.3, 1.5), 0.0, 0.9, 0.0, speed_shift(medians))
    assert load.busy and "changed" in load.text() and load.to_json()["speed_shift"] > SPEED_SHIFT_LIMIT


def test_one_files_spike_is_not_the_machine_changing_speed():
    """#67 item 2: two files racing, one with a single 847 ms round (its median 15.8 ms): the median of two factors
    is their average, which once marked the machine busy ("changed 28.66x together"); a shift most files share
    still counts."""
    spike = {"torchscript-frozen": [15.8, 15.9, 15.7, 847.0, 15.8, 15.9], "fused": [20.0, 20.1, 19.9, 20.2, 20.0, 20.1]}
    assert speed_shift(spike) < SPEED_SHIFT_LIMIT
    both = {"a": [1.0, 1.0, 2.1, 2.0], "b": [3.0, 3.1, 6.0, 6.2]}
    assert speed_shift(both) > SPEED_SHIFT_LIMIT
    three = {"a": [1.0, 1.0, 2.0, 2.0], "b": [3.0, 3.0, 6.0, 6.0], "c": [5.0, 5.0, 5.0, 5.0]}  # two of three moved
    assert speed_shift(three) > SPEED_SHIFT_LIMIT
