"""Was the machine busy while the rounds ran?  The load average before and after, and the CPU time other
processes took during the rounds (all CPU time the kernel counted, less this process tree's), as a share of
the machine's cores; on a VM, the time the hypervisor stole too.

A race on a loaded machine can "separate" variants by the load's timing, not theirs (seen: a sentence encoder
read executorch-fp32 1.70x over onnx-fp32 at load ~8 and onnx-fp32 1.35x over executorch-fp32 at load ~1,
"separated" both times), so compare reports these figures and, past :data:`BUSY_OTHERS_SHARE`, makes no
separation claim.  Linux only (``/proc``); elsewhere the figures are None and nothing is claimed about them.

    >>> watch = LoadWatch.start()
    >>> sum(range(10_000)) > 0
    True
    >>> load = watch.stop()
    >>> load.cores >= 1 and 0.0 <= load.others_cpu_share <= 1.0
    True
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

SPEED_SHIFT_LIMIT = 1.5
"""Every timed file slower (or faster) together by more than this between rounds is the machine changing speed
(its clock, a neighbour on the host's memory or caches), which no process here shows in /proc: seen once in ten
runs on a quiet 2-core VM, every file's round medians doubling from the fourth round on, executorch-int8 more than
litert-int8, and the race "separating" the file that is 1.27x slower on a steady machine."""
BUSY_OTHERS_SHARE = 0.25
"""Other processes' CPU time during the rounds, as a share of all cores, above which the machine counts as
busy: on 2 cores, half a core taken from the timed runtimes (two 2-thread runtimes at once slow each other many
times over)."""


@dataclasses.dataclass(frozen=True)
class MachineLoad:
    cores: int
    seconds: float
    loadavg_before: tuple[float, float, float] | None
    loadavg_after: tuple[float, float, float] | None
    others_cpu_share: float
    """Other processes' CPU time / (seconds x cores), 0..1."""
    ours_cpu_share: float
    """This process tree's CPU time (the timed workers included) / (seconds x cores)."""
    steal_share: float
    """Time the hypervisor gave to other guests / (seconds x cores) (0 on bare metal)."""
    speed_shift: float = 1.0
    """The machine's own change of speed during the rounds (:func:`speed_shift`): 1.0 steady."""

    @property
    def busy(self) -> bool:
        return self.others_cpu_share + self.steal_share > BUSY_OTHERS_SHARE or self.speed_shift > SPEED_SHIFT_LIMIT

    def text(self) -> str:
        avg = (f"load average {self.loadavg_before[0]:.2f} before, {self.loadavg_after[0]:.2f} after"
               if self.loadavg_before and self.loadavg_after else "load average unknown")
        shift = (f"; most files' times changed {self.speed_shift:.2f}x together between rounds (the machine's own "
                 f"speed moved)" if self.speed_shift > SPEED_SHIFT_LIMIT else "")
        return (f"{avg}; other processes took {100 * self.others_cpu_share:.0f}% and the hypervisor "
                f"{100 * self.steal_share:.0f}% of the {self.cores} cores during the rounds{shift}")

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "busy": self.busy, "busy_threshold_share": BUSY_OTHERS_SHARE,
                "speed_shift_limit": SPEED_SHIFT_LIMIT,
                "how": "others_cpu_share: all CPU time /proc/stat counted during the rounds less this process "
                       "tree's (/proc/PID/stat), over seconds x cores; steal_share: the hypervisor's steal time"}


class LoadWatch:
    """``LoadWatch.start()`` before the rounds, ``.stop()`` after: a :class:`MachineLoad`."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.loadavg = _loadavg()
        self.cpu = _cpu_ticks()
        self.ours = _tree_ticks(os.getpid())

    @classmethod
    def start(cls) -> "LoadWatch":
        return cls()

    def stop(self) -> MachineLoad:
        seconds = max(time.monotonic() - self.t0, 1e-9)
        cores = os.cpu_count() or 1
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        cpu, ours = _cpu_ticks(), _tree_ticks(os.getpid())
        whole = seconds * cores * hz
        busy = (cpu[0] - self.cpu[0]) if cpu and self.cpu else 0
        steal = (cpu[1] - self.cpu[1]) if cpu and self.cpu else 0
        mine = max(ours - self.ours, 0)
        return MachineLoad(cores, seconds, self.loadavg, _loadavg(), _share(busy - mine, whole), _share(mine, whole),
                           _share(steal, whole))


def _share(ticks: float, whole: float) -> float:
    return min(max(ticks / whole, 0.0), 1.0) if whole > 0 else 0.0


def _loadavg() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:
        return None


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, steal) clock ticks of all cores since boot, from /proc/stat's ``cpu`` line."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq, steal


def _tree_ticks(root: int) -> int:
    """utime + stime of ``root`` and every live descendant (with their reaped children's), in clock ticks."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                text = fh.read()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        parents[pid] = int(fields[1])
        ticks[pid] = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(ticks.get(pid, 0) for pid in tree)


def speed_shift(round_medians: dict[str, list[float]]) -> float:
    """How much the machine itself changed speed during interleaved rounds: for every two rounds, each file's
    round median in the later one over the earlier one; the pair's common change is the largest factor more than
    half of the files timed in both reached together (the (n//2+1)-th largest); the largest over all pairs.
    What moves most files together is the machine; one file's spike is not (with two files both must move: a
    median of two factors is their average, so one file's 847 ms round once read as "every file's time changed
    28.66x together").  Files need not move in the same round: each is compared with itself, no file's own
    median across rounds is taken as its steady speed (seen: files slowing from rounds 3 and 4 of 7).

    >>> round(speed_shift({"a": [1.0, 1.0, 2.0, 2.0, 2.0], "b": [3.0, 3.0, 6.0, 6.0, 6.0]}), 2)
    2.0
    >>> speed_shift({"a": [1.0, 1.1, 0.9], "b": [2.0, 2.0, 2.1]}) < 1.5
    True
    >>> speed_shift({"a": [15.8, 15.9, 847.0, 15.7, 15.8], "b": [20.0, 20.1, 20.2, 19.9, 20.0]}) < 1.5
    True
    """
    series = [m for m in round_medians.values() if len(m) >= 2]
    rounds = max((len(m) for m in series), default=0)
    shift = 1.0
    for i in range(rounds):
        for j in range(rounds):
            if i == j:
                continue
            ratios = sorted(m[j] / m[i] for m in series if len(m) > max(i, j) and m[i] > 0)
            if len(ratios) >= 2:  # one file alone is its own noise
                shift = max(shift, ratios[-(len(ratios) // 2 + 1)])
    return shift
