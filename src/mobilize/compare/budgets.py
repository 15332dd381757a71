"""Budgets beyond accuracy (issue #65 item 1): a release's limits on a file's size, memory, latency and decode
speed.  A file that misses one is not picked, its row says which budget it missed and by how much, and when no
file meets them compare says so and exits with :data:`GATE_EXIT` (the report written), so CI can gate on it.

    >>> from mobilize.report.results import VariantResult
    >>> from mobilize.core.outcome import Outcome
    >>> r = VariantResult("onnx-fp32", outcome=Outcome.OK, artifact="m.onnx", size_bytes=2_500_000,
    ...                   latency={"latency_ms_p50": 0.4})
    >>> [m["rule"] for m in misses(r, {"max_size_mb": 1.0, "max_latency_ms": 1.0})]
    ['budget-size']
    >>> misses(r, {"max_size_mb": 1.0})[0]["text"]
    'size 2.50 MB > 1 MB [rule budget-size]'
"""

from __future__ import annotations

from typing import Any

GATE_EXIT = 4
"""compare's exit status when no file is within the budgets (0 ok, 1 a bug, 2 bad input, 3 a stage out of time)."""
KEYS = ("max_size_mb", "max_memory_mb", "max_latency_ms", "min_tokens_per_s")


def memory_mb(r: Any) -> tuple[float | None, str]:
    """A file's memory and what it is: a decoder's own footprint in a fresh process beside its runtime alone, or
    a classifier's timing worker peak RSS (its runtime and torch included)."""
    tokens = r.tokens
    if tokens is not None and tokens.footprint_mb is not None:
        return tokens.footprint_mb, "footprint beyond its runtime"
    return r.peak_rss_mb, "timing worker's peak RSS, runtime and torch included"


def misses(r: Any, budgets: dict[str, Any]) -> list[dict[str, str]]:
    """Each budget ``r`` misses: its rule and one line (a figure not measured misses too: it cannot be shown
    within)."""
    out = []

    def miss(rule: str, text: str) -> None:
        out.append({"rule": rule, "text": f"{text} [rule {rule}]"})

    if budgets.get("max_size_mb") is not None:
        mb = r.size_bytes / 1e6 if r.size_bytes is not None else None
        if not r.artifact:
            miss("budget-size", "no file to ship (an eager module runs in this process's PyTorch)")
        elif mb is None or mb > budgets["max_size_mb"]:
            miss("budget-size", f"size {'not measured' if mb is None else f'{mb:.2f} MB'} > "
                                f"{budgets['max_size_mb']:g} MB")
    if budgets.get("max_memory_mb") is not None:
        mb, what = memory_mb(r)
        if mb is None or mb > budgets["max_memory_mb"]:
            miss("budget-memory", f"memory {'not measured' if mb is None else f'{mb:.0f} MB'} ({what}) > "
                                  f"{budgets['max_memory_mb']:g} MB")
    if budgets.get("max_latency_ms") is not None:
        pct = budgets.get("latency_percentile", 50)
        ms = (r.latency or {}).get(f"latency_ms_p{pct}")
        if ms is None or ms > budgets["max_latency_ms"]:
            miss("budget-latency", f"p{pct} {'not timed' if ms is None else f'{ms:.3f} ms'} > "
                                   f"{budgets['max_latency_ms']:g} ms")
    if budgets.get("min_tokens_per_s") is not None:
        rate = r.tokens.decode_tokens_per_s if r.tokens is not None else None
        if rate is None or rate < budgets["min_tokens_per_s"]:
            miss("budget-tokens", f"decode {'not timed' if rate is None else f'{rate:.1f} tokens/s'} < "
                                  f"{budgets['min_tokens_per_s']:g} tokens/s")
    return out


def apply(results: dict[str, Any], budgets: dict[str, Any]) -> dict[str, Any]:
    """Every OK file judged against the budgets; the ones that miss noted (``budget: ...``).  The summary
    report.json keeps: the budgets, the files within them, each miss, and whether none was met."""
    from mobilize.core.outcome import Outcome

    missed, within = {}, []
    for r in results.values():
        if r.outcome != Outcome.OK:
            continue
        found = misses(r, budgets)
        if found:
            missed[r.name] = found
            r.notes.insert(0, "budget: " + "; ".join(m["text"] for m in found))  # first: the table shows it
        else:
            within.append(r.name)
    return {"budgets": budgets, "within": within, "missed": missed, "none_met": not within}


def summary_line(summary: dict[str, Any]) -> str:
    given = ", ".join(f"{k} {v:g}" for k, v in summary["budgets"].items() if k in KEYS and v is not None)
    if summary["none_met"]:
        return (f"budgets ({given}): no OK file is within them; each row's note says which it missed "
                f"(exit status {GATE_EXIT})")
    return f"budgets ({given}): {len(summary['within'])} OK file(s) within them; the pick is among those"
