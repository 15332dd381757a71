"""A file's frame-to-answer figures from compare's timed rounds, and the infer-stage check.

Every round a timing worker answers with the file's frame loop (:class:`mobilize.compare.messages.FrameRound`): the
frame-to-answer times, each stage's, and the control.  Here they become the variant's ``frames`` block: the
statistics of the frame-to-answer time (the unit the race and the pick are made on), each stage's p50 and share,
and the **infer check**: the infer stage inside the loop against the same file alone, paired round by round (same
round, same machine state), with the rule that decided it.

    >>> check = infer_check([0.30, 0.31, 0.29], [0.15, 0.16, 0.15], [0.29, 0.30, 0.30])
    >>> check["rule"], round(check["ratio"], 2), round(check["control_ratio"], 2)
    ('frame-infer-pause', 1.96, 1.94)
    >>> infer_check([0.20, 0.21, 0.20], [0.20, 0.20, 0.20], [0.20, 0.20, 0.21])["rule"]
    'frame-infer-within'
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from mobilize.accuracy.stats import ratio_ci, spread_percent
from mobilize.bench.stats import BenchStats

from .loop import INFER, STAGES

INFER_TOLERANCE = 0.15
"""How much slower a file's infer stage may be inside the frame loop than the file alone before it is explained."""


def frame_figures(times_ns: list[int], total_ns: int, round_medians_ms: list[float], rounds: Sequence[Any],
                  alone_round_medians_ms: list[float]) -> dict[str, Any]:
    """The ``frames`` block of one variant: ``rounds`` are its :class:`~mobilize.compare.messages.FrameRound` of the
    timed rounds (warm-up left out); ``alone_round_medians_ms`` the file alone's median in each of those rounds."""
    stats = BenchStats.from_times_ns(times_ns, total_ns)
    per_stage = [[t for r in rounds for t in r.stage_ns[s]] for s in range(len(STAGES))]
    total = sum(sum(s) for s in per_stage) or 1
    stages = {name: {"latency_ms_p50": statistics.median(per_stage[s]) / 1e6 if per_stage[s] else None,
                     "share_pct": 100.0 * sum(per_stage[s]) / total} for s, name in enumerate(STAGES)}
    infer = [statistics.median(r.stage_ns[INFER]) / 1e6 for r in rounds]
    control = [statistics.median(r.gap_ns) / 1e6 for r in rounds if r.gap_ns]
    facts = dict(rounds[-1].facts) if rounds else {}
    return {"latency_ms_p50": stats.latency_ms_p50, "latency_ms_p90": stats.latency_ms_p90,
            "latency_ms_mean": stats.latency_ms_mean, "iterations": len(times_ns),
            "latency_ms_round_medians": list(round_medians_ms), "round_spread_percent": spread_percent(round_medians_ms),
            "stages": stages, "infer_check": infer_check(infer, alone_round_medians_ms, control), **facts}


def infer_check(infer_ms: list[float], alone_ms: list[float], control_ms: list[float]) -> dict[str, Any]:
    """The infer stage inside the loop against the file alone, per round (the paired estimator compare uses for
    every ratio), and the control (the file alone with the frame's convert between runs) that tells why it is
    slower when it is.  Each rule reads the ratio's 95% interval, never its centre alone: ``frame-infer-within``
    (the whole interval within 15% either way), ``frame-infer-faster`` (at most 15% over, and reaching further below
    1), ``frame-infer-unresolved`` (the interval holds both within and over 15%: too few or too noisy rounds),
    ``frame-infer-pause`` (all of it over, and the control is as slow: the pause between frames slows the runtime,
    whatever input it is handed), ``frame-infer-input`` (over, and the control is not: what the frame path hands
    the runtime costs it)."""
    n = min(len(infer_ms), len(alone_ms))
    if n == 0:
        return {"rule": "frame-infer-unmeasured", "reason": "no paired round of the loop and the file alone"}
    ci = ratio_ci(infer_ms[:n], alone_ms[:n])  # in-loop / alone: how many times as slow the loop's infer stage is
    m = min(n, len(control_ms))
    control = ratio_ci(control_ms[:m], alone_ms[:m]) if m else None
    loop_vs_control = ratio_ci(infer_ms[:m], control_ms[:m]) if m else None
    out = {"infer_ms_p50": statistics.median(infer_ms[:n]), "alone_ms_p50": statistics.median(alone_ms[:n]),
           "ratio": ci.ratio, "ratio_low": ci.low, "ratio_high": ci.high, "rounds": n,
           "control_ms_p50": statistics.median(control_ms[:m]) if m else None,
           "control_ratio": control.ratio if control else None, "tolerance": INFER_TOLERANCE}
    slower = f"{ci.ratio:.2f}x the file alone (95% CI {ci.low:.2f}-{ci.high:.2f}, {n} paired rounds)"
    over, under = 1 + INFER_TOLERANCE, 1 / (1 + INFER_TOLERANCE)
    if ci.high <= over and ci.low >= under:
        return {**out, "within": True, "rule": "frame-infer-within",
                "reason": f"infer inside the frame loop is {slower}: the whole interval within {INFER_TOLERANCE:.0%}"}
    if ci.high <= over:  # never more than 15% slower, and maybe faster: the loop costs the runtime nothing
        return {**out, "within": True, "rule": "frame-infer-faster",
                "reason": f"infer inside the frame loop is {slower}: not slower than the file alone (the interval "
                          f"ends at most {INFER_TOLERANCE:.0%} over and reaches below {under:.2f}x)"}
    if ci.low <= over:  # the interval reaches both sides of the tolerance: the rounds cannot tell
        return {**out, "within": None, "rule": "frame-infer-unresolved",
                "reason": f"infer inside the frame loop is {slower}: the interval holds both 'within "
                          f"{INFER_TOLERANCE:.0%}' and 'slower', so these rounds cannot tell (more --rounds narrow it)"}
    if control is not None and loop_vs_control.ratio <= 1 + INFER_TOLERANCE:
        return {**out, "within": False, "rule": "frame-infer-pause",
                "reason": f"infer inside the frame loop is {slower}; the file alone on its own input with the frame's "
                          f"convert between runs is {control.ratio:.2f}x too: the pause between frames slows the "
                          f"runtime (its thread pool idles, its caches refill), not the input the frame path hands it"}
    cause = (f"with the same pause between runs on its own input it is {control.ratio:.2f}x" if control
             else "no control was timed")
    return {**out, "within": False, "rule": "frame-infer-input",
            "reason": f"infer inside the frame loop is {slower}; {cause}: the input the frame path hands the runtime "
                      f"(the converter's buffer, its layout or memory) costs it"}
