"""The timed rounds of the decoder files, in one child process that loads them all (as tune times its
candidates): each round prefills the same prompt (time to first token) and decodes the same token ids one at a
time with the cache (time per token); rounds interleave the files and race them on the decode time per token,
the unit a user of a generating app waits on.  The machine's memory bandwidth is measured in the same process."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Sequence

PREFILL_WARMUP = 1
"""Untimed prefills before the first round of each file."""


def time_decoders(files: Sequence[tuple[str, str]], candidates: Sequence[str], threads: int, max_len: int,
                  prompt: Sequence[int], decode_ids: Sequence[int], rounds: int, time_budget_s: float,
                  progress: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """name -> rounds (decode per-token round medians, every step's time, time to first token per round), the
    race, the bandwidth and how busy the machine was."""
    from mobilize.bench.bandwidth import measure_bandwidth
    from mobilize.bench.load import LoadWatch, speed_shift
    from mobilize.bench.racing import Race
    from mobilize.bench.rounds import schedule
    from mobilize.core.errors import MobilizeError
    from mobilize.generation.plan import generation_variants

    sessions, failed = {}, {}
    for name, path in files:
        [variant] = generation_variants([name])
        try:
            sessions[name] = variant.load(Path(path), threads, max_len)
        except MobilizeError as exc:
            failed[name] = str(exc)
    bandwidth = measure_bandwidth()
    ttft: dict[str, list[float]] = {n: [] for n in sessions}

    def run_round(name: str, n: int) -> tuple[list[int], int]:
        s = sessions[name]
        t0 = time.perf_counter_ns()
        s.prefill(list(prompt))
        ttft[name].append((time.perf_counter_ns() - t0) / 1e6)
        times = []
        for token in list(decode_ids)[:max(1, n)]:
            t = time.perf_counter_ns()
            s.decode(int(token))
            times.append(time.perf_counter_ns() - t)
        return times, sum(times)

    race = Race(list(sessions), [c for c in candidates if c in sessions], rounds, time_budget_s)
    watch = LoadWatch.start()
    got = schedule(list(sessions), run_round, rounds, len(decode_ids), warmup=PREFILL_WARMUP, race=race)
    load = dataclasses.replace(watch.stop(), speed_shift=speed_shift({n: rt.round_medians_ms for n, rt in got.items()}))
    for s in sessions.values():
        s.close()
    out = {name: {"decode_round_medians_ms": rt.round_medians_ms, "decode": rt.stats().to_json(),
                  "prefill_ms": ttft[name][PREFILL_WARMUP:] or ttft[name]} for name, rt in got.items()}
    return {"timed": out, "failed": failed, "racing": race.record.to_json(), "bandwidth": bandwidth.to_json(),
            "machine_load": load.to_json()}
