"""tune's timing: the candidates within budget in interleaved rounds, the winner, and the best thread count.

One estimator everywhere (:data:`mobilize.bench.racing.ESTIMATOR`): a candidate's speed against another is the
geometric mean of their paired per-round ratios with its t interval (:func:`mobilize.accuracy.stats.ratio_ci`);
the winner is the candidate with the lowest geometric mean of its round medians, so the ratio printed beside
an interval is always that interval's centre.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Callable, Sequence

from mobilize.bench.racing import ESTIMATOR, geometric_mean, paired_leader

MAX_THREADS = 16
"""The thread search stops here on machines with more cores."""


def choose(candidates: list, sample: list, rounds: int, iterations: int, interrupted: bool,
           echo: Callable[[str], None]) -> tuple[Any, list[str]]:
    """Time every candidate within budget in interleaved rounds; the fastest wins; name a tie."""
    from mobilize.accuracy.stats import ratio_ci

    ok = [c for c in candidates if c.within_budget]
    for c in candidates:
        if c.lost is None and not c.within_budget and c.verdict is not None:
            c.lost = f"{c.verdict.outcome}: {c.verdict.reason}"
    if not ok:
        return None, []
    try:  # one candidate too: the winner's latency is always measured, never "-"
        time_candidates(ok, sample, 2 if interrupted else rounds, iterations, echo)
    except KeyboardInterrupt:
        echo("interrupted while timing: choosing on the rounds measured so far")
    timed = [c for c in ok if c.round_medians_ms] or ok
    named = {c.name: c for c in timed}
    winner = named[paired_leader(list(named), {n: c.round_medians_ms for n, c in named.items()})] \
        if all(c.round_medians_ms for c in timed) else min(timed, key=lambda c: geometric_mean(c.round_medians_ms))
    tie_with = []
    for c in timed:
        if c is winner:
            continue
        ci = ratio_ci(c.round_medians_ms, winner.round_medians_ms)
        if not c.round_medians_ms or not ci.significant:
            tie_with.append(c.name)
            c.lost = (f"tie: {winner.name} is {ci.ratio:.2f}x as fast (95% CI {ci.low:.2f}-{ci.high:.2f}, includes 1); "
                      f"{winner.name} kept as the faster on the paired estimator")
        else:
            c.lost = f"slower: {winner.name} is {ci.ratio:.2f}x as fast (95% CI {ci.low:.2f}-{ci.high:.2f})"
    return winner, tie_with


def time_candidates(cands: list, sample: list, rounds: int, iterations: int, echo: Callable[[str], None]) -> None:
    """Interleaved rounds at one thread; each candidate gets its round medians and their median."""
    echo(f"timing {len(cands)} candidate(s) within budget: {rounds} interleaved rounds of {iterations}")
    got = _rounds({c.name: (c.path, 1) for c in cands}, sample, rounds, iterations)
    for c in cands:
        medians = got[c.name]
        c.round_medians_ms = [round(x, 4) for x in medians]
        c.latency_ms_p50 = statistics.median(medians) if medians else None


def best_threads(path: Path, sample: list, cores: int, rounds: int, iterations: int) -> dict[str, Any]:
    """The winner at 1..cores threads in interleaved rounds.  Rule ``fewest-threads-within-noise``: the fewest
    threads whose time is not slower beyond noise than the fastest count's (more threads that buy nothing within
    noise only take cores from the rest of the app)."""
    from mobilize.accuracy.stats import ratio_ci

    counts = list(range(1, max(1, min(cores, MAX_THREADS)) + 1))
    got = _rounds({str(k): (path, k) for k in counts}, sample, rounds, iterations)
    fastest = min(counts, key=lambda k: geometric_mean(got[str(k)]))
    best, against = fastest, None
    for k in counts:
        ci = ratio_ci(got[str(k)], got[str(fastest)])
        if k == fastest or not ci.significant:
            best, against = k, ci
            break
    one = ratio_ci(got["1"], got[str(best)])
    if len(counts) == 1:
        line = "best thread count: 1 (this machine has one core: no other count to compare)"
    elif best == 1:  # say what the other counts measured, not 1 against itself
        other = max(counts) if fastest == 1 else fastest
        vs = ratio_ci(got["1"], got[str(other)])
        line = (f"best thread count: 1 of 1-{counts[-1]} (rule fewest-threads-within-noise; {other} threads "
                f"{vs.ratio:.2f}x as fast as 1, 95% CI {vs.low:.2f}-{vs.high:.2f}"
                f"{', within noise' if not vs.significant else ', slower'})")
    else:
        line = (f"best thread count: {best} of 1-{counts[-1]} (rule fewest-threads-within-noise; {best} thread(s) "
                f"{one.ratio:.2f}x as fast as 1, 95% CI {one.low:.2f}-{one.high:.2f})")
    if best != fastest:
        line += (f"; {fastest} threads were {against.ratio:.2f}x as fast, within noise (95% CI "
                 f"{against.low:.2f}-{against.high:.2f})")
    return {"best": best, "fastest": fastest, "rule": "fewest-threads-within-noise", "estimator": ESTIMATOR,
            "vs_1_thread": one.to_json(), "line": line,
            "threads": {str(k): {"round_medians_ms": [round(x, 4) for x in got[str(k)]],
                                 "latency_ms_p50": statistics.median(got[str(k)]) if got[str(k)] else None}
                        for k in counts}}


def _rounds(runs: dict[str, tuple[Path, int]], sample: list, rounds: int, iterations: int) -> dict[str, list[float]]:
    """name -> (file, threads): interleaved rounds of every session in this process; name -> round medians."""
    from mobilize.bench.harness import warm_round
    from mobilize.bench.rounds import schedule
    from mobilize.runtimes.base import open_session

    sessions, prepared = {}, {}
    try:
        for name, (path, threads) in runs.items():
            s = open_session(artifact(path, None), threads=threads)
            sessions[name] = s
            prepared[name] = s.prepare(sample)
        got = schedule(list(runs), lambda n, k: warm_round(sessions[n].run_prepared, prepared[n], k), rounds,
                       iterations)
    finally:
        for s in sessions.values():
            s.close()
    return {n: r.round_medians_ms for n, r in got.items()}


def artifact(path: Path, specs: Sequence[Any] | None) -> Any:
    from mobilize.core.artifact import Artifact, format_for_path

    return Artifact(path=Path(path), format=format_for_path(path), input_specs=list(specs or []))
