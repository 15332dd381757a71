"""An HTML fragment of a lint summary: findings, targets, and the per-layer profile as an inline SVG bar chart.

Self-contained (inline styles, no scripts, no external files) so a report can paste it anywhere;
it draws from the JSON-able dict of ``mobilize.lint.summary_dict``, so a saved report.json
renders the same.  Each profile row gets a bar for its MAC share and, when per-layer time was
measured, one for its time share beside it: a layer slow for its MACs shows a long time bar
over a short MAC bar.
"""

from __future__ import annotations

from html import escape
from typing import Any

MAC_COLOR = "#4e79a7"
TIME_COLOR = "#e15759"
_LABEL_W, _BAR_W, _ROW_H, _PAD = 260, 360, 22, 6
_CHAR_PX, _MAX_LABEL_CHARS = 7, 60
"""Width of a wide glyph at font-size 11 (checked in Chromium), and the most label characters the label column
widens to (a transformer's ``bert.encoder.layer.10.attention.output.dense  Linear`` fits whole); a longer label is
elided in the middle."""


def render_fragment(summary: dict[str, Any]) -> str:
    """``<section>`` with the lint summary; ``summary`` is ``summary_dict(report)`` (or its JSON round trip)."""
    parts = ['<section class="mobilize-lint" style="font-family:sans-serif;font-size:13px">',
             f"<h3>Lint: {escape(str(summary.get('model', '')))}</h3>",
             f"<p>{escape(str(summary.get('summary', '')))}</p>"]
    findings = summary.get("findings") or []
    if findings:
        parts.append(_table(["", "rule", "layer", "finding", "fix"],
                            [["!" if f.get("severity") == "warn" else "i", f.get("rule", ""), f.get("module") or "(model)",
                              f.get("message", ""), f.get("fix", "")] for f in findings]))
    targets = summary.get("targets") or []
    if targets:
        parts.append(_table(["target", "status", "partitions", "ops taken", "summary"],
                            [[t.get("target", ""), t.get("status", ""), _or_dash(t.get("partitions")),
                              f"{t['ops_supported']}/{t['ops_total']}" if t.get("ops_total") is not None
                              and t.get("ops_supported") is not None else "-", t.get("summary", "")] for t in targets]))
    profile = summary.get("profile")
    if profile and profile.get("rows"):
        parts.append(profile_chart(profile))
    parts.append("</section>")
    return "\n".join(parts)


def profile_chart(profile: dict[str, Any]) -> str:
    """Inline SVG: one row per layer, its MAC share (and time share when measured) as bars."""
    rows = profile["rows"]
    timed = any(r.get("time_share") is not None for r in rows)
    top = max([r.get("mac_share") or 0.0 for r in rows] + [r.get("time_share") or 0.0 for r in rows] + [1e-9])
    bar_h = (_ROW_H - _PAD) / (2 if timed else 1)
    height = _ROW_H * len(rows) + 40
    labels = [f"{row.get('module', '')}  {row.get('kind', '')}" for row in rows]
    chars = min(_MAX_LABEL_CHARS, max(len(label) for label in labels))
    label_w = max(_LABEL_W, chars * _CHAR_PX + 12)
    width = label_w + _BAR_W + 70
    title = (f"Per-layer profile: {profile.get('total_macs', 0) / 1e6:.1f}M MACs"
             + (f", {profile['total_time_ms']:.3f} ms measured on {profile.get('timed_on')}" if timed else ""))
    out = [f'<figure style="margin:8px 0"><figcaption>{escape(title)}</figcaption>',
           f'<svg xmlns="http://www.w3.org/2000/svg" id="profile-chart" width="{width}" height="{height}" role="img" '
           f'aria-label="{escape(title)}">']
    for i, (row, label, shown) in enumerate(zip(rows, labels, distinct_labels(labels, chars))):
        y = 10 + i * _ROW_H
        out.append(f'<text x="{label_w - 6}" y="{y + _ROW_H / 2:.1f}" text-anchor="end" font-size="11" '
                   f'dominant-baseline="middle">{escape(shown)}<title>{escape(label)}</title></text>')
        bars = [("MACs", row.get("mac_share") or 0.0, MAC_COLOR)]
        if timed:
            bars.append(("time", row.get("time_share") or 0.0, TIME_COLOR))
        for j, (what, share, color) in enumerate(bars):
            by = y + _PAD / 2 + j * bar_h
            w = max(0.5, _BAR_W * share / top)
            out.append(f'<rect x="{label_w}" y="{by:.1f}" width="{w:.1f}" height="{bar_h - 1:.1f}" fill="{color}">'
                       f"<title>{escape(what)} share {share:.1%}</title></rect>")
            out.append(f'<text x="{label_w + w + 4:.1f}" y="{by + bar_h / 2:.1f}" font-size="10" '
                       f'dominant-baseline="middle">{share:.1%}</text>')
    legend_y = height - 14
    out.append(f'<rect x="{label_w}" y="{legend_y - 8}" width="10" height="10" fill="{MAC_COLOR}"/>'
               f'<text x="{label_w + 14}" y="{legend_y}" font-size="11">MAC share</text>')
    if timed:
        out.append(f'<rect x="{label_w + 100}" y="{legend_y - 8}" width="10" height="10" fill="{TIME_COLOR}"/>'
                   f'<text x="{label_w + 114}" y="{legend_y}" font-size="11">measured time share</text>')
    out.append("</svg>")
    omitted = profile.get("rows_omitted") or 0
    if omitted:  # the bars shown and this line add up to the whole
        left = max(0.0, 1.0 - sum(r.get("mac_share") or 0.0 for r in rows))
        out.append(f"<p>{omitted} smaller rows not shown: {left:.1%} of the MACs.</p>")
    out.append("</figure>")
    return "\n".join(out)


def _table(head: list[str], rows: list[list[Any]]) -> str:
    cell = 'style="border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top"'
    lines = ['<table style="border-collapse:collapse;margin:8px 0">',
             "<tr>" + "".join(f"<th {cell}>{escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        lines.append("<tr>" + "".join(f"<td {cell}>{escape(str(v))}</td>" for v in row) + "</tr>")
    lines.append("</table>")
    return "\n".join(lines)


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def distinct_labels(labels: list[str], width: int) -> list[str]:
    """Each label in at most ``width`` characters, elided in the middle (a layer's path differs at its end: the
    block number and the leaf), and no two different labels shown alike (the full text goes in a title)."""
    shown = [_elide(text, width, width // 3) for text in labels]
    groups: dict[str, list[str]] = {}
    for text, short in zip(labels, shown):
        if text not in groups.setdefault(short, []):
            groups[short].append(text)
    fixed: dict[str, str] = {}
    for texts in (t for t in groups.values() if len(t) > 1):
        for head in sorted(range(width), key=lambda h: abs(h - width // 3)):  # keep more of the start or the end
            if len({_elide(t, width, head) for t in texts}) == len(texts):
                fixed.update((t, _elide(t, width, head)) for t in texts)
                break
        else:  # they differ only deep in the middle: show the part around the difference
            fixed.update((t, _around(t, max(_common_prefix(t, o) for o in texts if o != t), width)) for t in texts)
    return [fixed.get(text, short) for text, short in zip(labels, shown)]


def _elide(text: str, width: int, head: int) -> str:
    """``text`` if it fits, else its first ``head`` characters, "…" and as much of its end as fits."""
    if len(text) <= width:
        return text
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def _around(text: str, at: int, width: int) -> str:
    """``width`` characters of ``text`` centred on position ``at``, with "…" where text was left out."""
    start = max(0, min(at - (width - 2) // 2, len(text) - (width - 2)))
    window = text[start:start + width - 2]
    return ("…" if start else "") + window + ("…" if start + len(window) < len(text) else "")


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n

