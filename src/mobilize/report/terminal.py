"""The terminal table, sorted by latency; failures listed after the measured variants.

    >>> print(format_table(report))
    variant            format       runtime      p50 ms  p90 ms  speedup  size MB  top-1  drop  notes
    onnx-int8          onnx         onnxruntime    1.21    1.30    5.02x     0.81  97.2   0.4   ...
"""

from __future__ import annotations

from typing import Any


def _fmt(value: Any, spec: str, empty: str = "-") -> str:
    return empty if value is None else format(value, spec)


def format_table(report: dict[str, Any], note_width: int = 60) -> str:
    variants = report["variants"]
    measured = sorted((v for v in variants if v.get("latency_ms_p50")), key=lambda v: v["latency_ms_p50"])
    failed = [v for v in variants if not v.get("latency_ms_p50")]
    header = (f"{'variant':<20} {'outcome':<11} {'format':<12} {'runtime':<12} {'p50 ms':>8} {'p90 ms':>8} "
              f"{'speedup':>8} {'size MB':>8} {'top-1 %':>8} {'drop':>6} {'sqnr dB':>8}  notes")
    lines = [header, "-" * len(header)]
    for v in measured + failed:
        acc = v.get("accuracy") or {}
        size = v["size_bytes"] / 1e6 if v.get("size_bytes") else None
        speed = v.get("speedup_vs_eager_fp32")
        note = _headline(v)
        if len(note) > note_width:
            note = note[: note_width - 1] + "…"
        lines.append(
            f"{v['name']:<20} {v['outcome']:<11} {(v.get('format') or '-'):<12} {(v.get('runtime') or '-'):<12} "
            f"{_fmt(v.get('latency_ms_p50'), '8.2f'):>8} {_fmt(v.get('latency_ms_p90'), '8.2f'):>8} "
            f"{(_fmt(speed, '.2f') + 'x') if speed else '-':>8} {_fmt(size, '8.2f'):>8} "
            f"{_fmt(acc.get('top1'), '8.1f'):>8} {_fmt(acc.get('top1_drop'), '+6.1f'):>6} "
            f"{_fmt(acc.get('sqnr_db'), '8.1f', 'exact' if acc.get('finite', True) else 'nan'):>8}  {note}")
    return "\n".join(lines)


def _headline(v: dict[str, Any]) -> str:
    """The one note that matters most for the table: a failure, a warning, else the first note."""
    notes = v.get("notes") or []
    for key in ("MISMATCH", "FAIL", "TIMEOUT", "WARNING"):
        for n in notes:
            if key in n:
                return n
    return notes[0] if notes else ""


def summary_line(report: dict[str, Any]) -> str:
    ok = [v for v in report["variants"] if v["outcome"] == "OK" and v.get("latency_ms_p50")]
    if not ok:
        return "no variant completed"
    best = min(ok, key=lambda v: v["latency_ms_p50"])
    acc = best.get("accuracy") or {}
    drop = f", top-1 drop {acc['top1_drop']:+.1f} points" if acc.get("top1_drop") is not None else ""
    speed = f"{best['speedup_vs_eager_fp32']:.2f}x eager fp32" if best.get("speedup_vs_eager_fp32") else ""
    return f"fastest: {best['name']} at {best['latency_ms_p50']:.2f} ms p50 ({speed}{drop})"
