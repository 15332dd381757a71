"""The terminal view of a generation compare: one row per decoder file (prefill, decode per token and tokens/s,
the share of the bandwidth bound, perplexity change with its interval, agreement, the rule), then the pick.

    >>> lines = generation_lines({"variants": [], "recommended": None, "notes": []})
    >>> lines[-1].startswith("no decoder file")
    True
"""

from __future__ import annotations

from typing import Any


def _f(value: Any, fmt: str, none: str = "-") -> str:
    return none if value is None else format(value, fmt)


def _row(v: dict[str, Any]) -> str:
    t = v.get("timing") or {}
    q = (v.get("verdict") or {}).get("numbers") or {}
    speed = t.get("decode_speedup")
    speed_text = "-" if not speed else f"{speed['ratio']:.2f}x" + ("" if speed.get("significant") else "~")
    ppl = q.get("ppl_increase_percent")
    ci = (f"[{q['ppl_increase_percent_low']:+.1f},{q['ppl_increase_percent_high']:+.1f}]"
          if ppl is not None and q.get("ppl_increase_percent_low") is not None else "")
    size = v.get("size_bytes")
    return (f"{v['name']:<22} {v['outcome']:<12} {v['weights']:<5} {_f(size and size / 1e6, '7.2f'):>7} "
            f"{_f(v.get('peak_rss_mb'), '6.0f'):>6} "
            f"{_f(t.get('prefill_ms_p50'), '8.2f'):>8} {_f(t.get('decode_ms_per_token_p50'), '8.3f'):>8} "
            f"{_f(t.get('decode_ms_per_token_p90'), '8.3f'):>8} {_f(t.get('decode_tokens_per_s'), '8.0f'):>8} "
            f"{_f(t.get('percent_of_bound'), '6.0f'):>6} {speed_text:>7} "
            f"{_f(q.get('candidate_ppl'), '7.3f'):>7} {_f(ppl, '+7.2f'):>7} {ci:<15} "
            f"{_f(q.get('top1_agreement') and 100 * q['top1_agreement'], '6.1f'):>6}  "
            f"{(v.get('verdict') or {}).get('rule', '-'):<20} {(v.get('notes') or [''])[0][:70]}")


def generation_lines(report: dict[str, Any]) -> list[str]:
    head = (f"{'variant':<22} {'outcome':<12} {'wts':<5} {'size MB':>7} {'RSS MB':>6} {'TTFT ms':>8} {'ms/tok':>8} {'p90':>8} "
            f"{'tok/s':>8} {'%bound':>6} {'speedup':>7} {'ppl':>7} {'Δppl %':>7} {'95% CI':<15} {'agree%':>6}  "
            f"{'rule':<20} notes")
    lines = [head, "-" * len(head)] + [_row(v) for v in report["variants"]]
    if report["variants"]:
        bw = report.get("bandwidth") or {}
        lines += ["",
                  f"RSS MB: peak memory of the process that loaded the file and ran its checks; "
                  f"TTFT: prefill of a {report.get('settings', {}).get('prompt_tokens', '?')}-token prompt; ms/tok, p90, "
                  f"tok/s: decode with the KV cache, the same token ids in every file; %bound: tokens/s over the "
                  f"bandwidth bound (file bytes read per token at {_f(bw.get('gb_per_s'), '.1f')} GB/s measured in "
                  f"this run from DRAM; above 100%: the weights fit in the CPU's caches); speedup: decode vs {report.get('reference_variant')} (~ : a tie); Δppl: perplexity "
                  f"vs the float model on {report.get('held_out', 'held-out text')}, paired bootstrap over sequences"]
    for v in report["variants"]:
        verdict = v.get("verdict") or {}
        if v["outcome"] not in ("OK", "PENDING") or verdict.get("rule") == "cache-consistency":
            why = verdict.get("reason") or "; ".join(v.get("notes") or [])
            lines.append(f"{v['name']}: {v['outcome']}: {why}")
    rec = report.get("recommended")
    cpu = (report.get("host_cpu") or {}).get("model", "this CPU")
    if rec:
        lines.append(f"recommended: {rec['name']}")
        lines.append(f"  why: {rec['reason']}")
        lines.append(f"  scope: timed on {cpu}, {report.get('threads')} thread(s); the ranking holds for this CPU")
    else:
        lines.append("no decoder file is OK and timed: nothing to recommend")
    return lines
