"""tune-report.html: one self-contained page (inline SVG and CSS, no scripts or network) drawn from
``tune-report.json``: the candidates with their verdicts, the per-layer SQNR chart of every route
the search localised, and the time-weighted profiles and "why is int8 not faster" diagnoses.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mobilize.report.html import CHAR_W, CSS, esc, latency_chart

TOP_LAYERS = 15
"""Layers drawn per route (the report ranks them worst first)."""
SERIES = (
    ("alone_sqnr_db", "model output, only this layer quantized", "#b00020"),
    ("alone_float_sqnr_db", "model output, only this layer kept float", "#2e7d32"),
    ("output_sqnr_db", "model output", "#6a1b9a"),
    ("drift_sqnr_db", "this layer's output vs float (error accumulated up to it)", "#1565c0"),
    ("qdq_sqnr_db", "this layer's own quantization noise", "#ef6c00"),
)
"""Per-layer SQNR fields (dB) drawn as bars, in this order, with their legends; any other ``*_sqnr_db`` field
a route reports is drawn after them under its own name."""
_LABEL_W, _BAR_W, _BAR_H, _ROW_PAD, _WIDTH = 250, 420, 14, 8, 760
_INSIDE, _OUTSIDE = "#1565c0", "#b00020"
_LEGEND_H = 16


def write_tune_html(report_json: Path, html_path: Path | None = None) -> Path:
    """Render ``tune-report.json`` into ``tune-report.html`` beside it (or ``html_path``); returns the path."""
    from mobilize.core.artifact import atomic_write_text

    report_json = Path(report_json)
    out = Path(html_path) if html_path is not None else report_json.with_suffix(".html")
    atomic_write_text(out, render_tune_html(json.loads(report_json.read_text())))
    return out


def render_tune_html(report: dict[str, Any]) -> str:
    candidates = report.get("candidates") or []
    winner = report.get("winner")
    policy = report.get("policy") or {}
    task = report.get("task") or {}
    measure = next((c["task_measure"] for c in candidates if c.get("task_measure")), None)
    budget = _budget_text(policy, labelled=report.get("reference_top1") is not None, measure=measure)
    reference = (f"Float model top-1: {_fmt(report.get('reference_top1'), '%')}. "
                 if task.get("name") in (None, "classification") and not measure else "")
    head = (f"<p>Winner: <b>{esc(winner) if winner else 'none within budget'}</b>"
            + (f"; a tie on speed with {esc(', '.join(report['tie_with']))} (paired rounds, 95%)"
               if report.get("tie_with") else "")
            + f". Budget: {esc(budget)}. {esc(task.get('text', ''))}{'. ' if task else ''}{reference}"
            f"Search took {_fmt(report.get('search_s'), ' s', 1)}"
            + (". <span class=\"bad\">Interrupted: the best found so far.</span>" if report.get("interrupted") else ".")
            + "</p>")
    timed = [{"name": c["name"], "latency_ms_p50": c["latency_ms_p50"],
              "latency_ms_p10": min(c.get("round_medians_ms") or [c["latency_ms_p50"]]),
              "latency_ms_p90": max(c.get("round_medians_ms") or [c["latency_ms_p50"]]),
              "outcome": (c.get("verdict") or {}).get("outcome", "?")} for c in candidates if c.get("latency_ms_p50")]
    layers = report.get("layers") or {}
    layer_html = "".join(layer_chart(route, rows) for route, rows in layers.items() if rows) or \
        "<p>No route was localised (no int8 candidate missed the budget).</p>"
    profiles = _profiles(report)
    profile_html = "".join(profile_chart(name, p) for name, p in profiles)
    diagnoses = "".join(diagnosis_html(d) for d in report.get("diagnoses") or [])
    files = "".join(f"<li>{esc(f)}</li>" for f in report.get("files") or [])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mobilize tune{': ' + esc(winner) if winner else ''}</title>
<style>{CSS}</style></head><body>
<h1>mobilize tune</h1>
{head}
<h2>Candidates</h2>{candidates_table(candidates, winner)}
<h2>Latency of the candidates within budget</h2>{latency_chart(timed) if timed else '<p>None was timed.</p>'}
<h2>Per-layer SQNR</h2>
<p class="muted">Lower is worse. Layers are ranked by what their quantization alone costs the model's output;
a layer whose own noise looks harmless but whose alone-quantized output SQNR is low hides an outlier.</p>
{layer_html}
<h2>Where the time goes</h2>{profile_html or '<p>No time-weighted profile in this report.</p>'}
{('<h2>Why is int8 not faster</h2>' + diagnoses) if diagnoses else ''}
<h2>Files</h2><ul>{files or '<li>None.</li>'}</ul>
</body></html>
"""


def candidates_table(candidates: list[dict[str, Any]], winner: str | None) -> str:
    rows = []
    measure = next((c["task_measure"] for c in candidates if c.get("task_measure")), None)
    for c in candidates:
        verdict = c.get("verdict") or {}
        outcome = verdict.get("outcome") or ("FAILED" if c.get("error") else "-")
        cls = "ok" if verdict.get("ok") else "bad"
        tm = c.get("task_measure") or {}
        ci = tm.get("drop_ci95") if measure else c.get("top1_drop_ci")
        drop = _fmt(tm.get("drop") if measure else c.get("top1_drop_points"))
        if ci and drop != "-":
            drop += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
        why = "winner" if c["name"] == winner else (c.get("lost") or "-")
        kept = len(c.get("excluded_nodes") or [])
        rows.append(
            f'<tr><td>{esc(c["name"])}{" ★" if c["name"] == winner else ""}</td><td class="l">{esc(c.get("runtime"))}</td>'
            f'<td class="l">{esc(c.get("kind"))}</td><td class="l {cls}">{esc(outcome)}</td>'
            f'<td class="l" title="{esc(verdict.get("reason", ""))}">{esc(verdict.get("rule", "-"))}</td>'
            f"<td>{_fmt(tm.get('value') if measure else c.get('top1'))}</td><td>{esc(drop)}</td><td>{_fmt(c.get('cosine'), digits=5)}</td>"
            f"<td>{_fmt(c.get('latency_ms_p50'), digits=3)}</td><td>{kept or '-'}</td>"
            f'<td class="l">{esc(why)}</td></tr>')
    reasons = "".join(f"<li><b>{esc(c['name'])}</b>: {esc((c.get('verdict') or {}).get('reason') or c.get('error'))}</li>"
                      for c in candidates if c.get("verdict") or c.get("error"))
    return ('<table id="candidates"><tr><th>candidate</th><th>runtime</th><th>kind</th><th>verdict</th><th>rule</th>'
            f"<th>{esc(measure['column'] if measure else 'top-1 %')}</th><th>drop (95% CI)</th><th>cosine</th><th>p50 ms</th>"
            "<th>kept float</th><th>why it lost</th>"
            f"</tr>{''.join(rows)}</table><ul>{reasons}</ul>")


def _series(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    present = {k for r in rows for k, v in r.items() if k.endswith("_sqnr_db") and v is not None}
    known = [s for s in SERIES if s[0] in present]
    extra = sorted(present - {s[0] for s in SERIES})
    palette = ("#00838f", "#5d4037", "#455a64")
    return known + [(k, k.replace("_", " "), palette[i % len(palette)]) for i, k in enumerate(extra)]


def layer_chart(route: str, layers: list[dict[str, Any]]) -> str:
    """Horizontal bars: per layer (worst first), one bar per SQNR field the route reports (dB)."""
    rows = layers[:TOP_LAYERS]
    series = _series(rows)
    if not series:
        return f"<h3>{esc(route)}</h3><p>No SQNR figures.</p>"
    values = [r.get(k) for r in rows for k, _, _ in series]
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    top = max(finite + [1])
    row_h = len(series) * _BAR_H + _ROW_PAD
    legend, legend_h = _legend([(legend, color) for _, legend, color in series], 10 + len(rows) * row_h + 12)
    height = 10 + len(rows) * row_h + legend_h + 4
    ident = "layers-" + "".join(ch if ch.isalnum() else "-" for ch in route)
    parts = [f'<h3>{esc(route)}</h3><svg id="{esc(ident)}" class="layer-chart" width="{_WIDTH}" height="{height}" '
             f'role="img" aria-label="per-layer SQNR of {esc(route)}">']
    for i, r in enumerate(rows):
        y = 10 + i * row_h
        name = str(r.get("layer") or r.get("tensor") or r.get("name") or r.get("node") or f"layer {i + 1}")
        label = f"{i + 1}. {name}" + (f" ({r['op_type']})" if r.get("op_type") else "")
        tip = label + (f", computed by {r['producer']}" if r.get("producer") else "")
        parts.append(f'<text x="{_LABEL_W - 6}" y="{y + row_h / 2 + 2:.1f}" text-anchor="end">'
                     f'{esc(_cut(label, int((_LABEL_W - 12) / CHAR_W)))}<title>{esc(tip)}</title></text>')
        for j, (key, what, color) in enumerate(series):
            v = r.get(key)
            by = y + j * _BAR_H
            if v is None:
                text, w = "-", 0.0
            elif not math.isfinite(v):
                text, w = ("inf" if v > 0 else "-inf"), (_BAR_W if v > 0 else 0.0)
            else:
                text, w = f"{v:.1f} dB", max(0.0, v) / top * _BAR_W
            parts.append(f'<rect x="{_LABEL_W}" y="{by + 1}" width="{w:.1f}" height="{_BAR_H - 2}" fill="{color}" '
                         f'opacity="0.8"><title>{esc(what)}: {esc(text)}</title></rect>')
            parts.append(f'<text class="value" x="{_LABEL_W + w + 4:.1f}" y="{by + _BAR_H - 3}" style="font-size:10px">'
                         f"{esc(text)}</text>")
    parts.append(legend)
    parts.append("</svg>")
    more = len(layers) - len(rows)
    causes = "".join(f'<p class="bad">cause: {esc(r["masking"])}</p>' for r in layers if r.get("masking"))
    return "".join(parts) + causes + (f'<p class="muted">{more} more layer(s) in tune-report.json.</p>'
                                      if more > 0 else "")


def _legend(items: list[tuple[str, str]], y: float) -> tuple[str, float]:
    """Legend entries left to right, wrapping onto a new line when the chart's width is used up; returns the SVG
    and the height it takes."""
    parts, x, line = [], 10.0, 0
    for text, color in items:
        w = len(text) * CHAR_W * 0.95  # 10 px text: a little narrower than the 11 px CHAR_W estimate
        if x > 10.0 and x + 14 + w > _WIDTH - 10:
            x, line = 10.0, line + 1
        ly = y + line * _LEGEND_H
        parts.append(f'<rect x="{x:.1f}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                     f'<text class="legend" x="{x + 14:.1f}" y="{ly}" style="font-size:10px">{esc(text)}</text>')
        x += 14 + w + 14
    return "".join(parts), (line + 1) * _LEGEND_H


def _profiles(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(title, TimeProfile JSON) of every profile in the report: ``profiles`` (name -> profile, or a list) and the
    two profiles of each ExecuTorch diagnosis."""
    found: list[tuple[str, dict[str, Any]]] = []
    given = report.get("profiles") or {}
    items = given.items() if isinstance(given, dict) else ((p.get("path", "profile"), p) for p in given)
    found += [(str(name), p) for name, p in items if p]
    for d in report.get("diagnoses") or []:
        for key in ("fp32_profile", "int8_profile"):
            if d.get(key):
                found.append((f"{d.get('candidate', '')} {key.split('_')[0]}".strip(), d[key]))
    return found


def profile_chart(title: str, data: dict[str, Any], top: int = 12) -> str:
    """Per-op-kind share of one run, inside (blue) and outside (red) the delegate, and the profile's WARNING."""
    from mobilize.profile.core import TimeProfile

    p = TimeProfile.from_json(data)
    head = f"<h3>{esc(title)}</h3><p>{esc(p.summary())}</p>"
    if not p.available:
        return head
    ops = p.by_op()
    rows = ops[:top]
    if not rows:
        return head
    # the bars add up to the whole run: the op kinds past the top ones, and the runtime's own time between ops
    rest = ops[top:]
    extra = [(f"{len(rest)} other op kinds", "", 1, sum(us for *_, us in rest))] if rest else []
    if p.overhead_us > 0:
        extra.append(("runtime between ops", "", 1, p.overhead_us))
    rows = rows + extra
    drawn = sum(us for *_, us in rows)
    missing = p.percent(max(0.0, p.total_us - drawn))
    head += (f'<p class="muted">The bars add up to the run\'s {p.total_us / 1e3:.3f} ms'
             + (f" but for {missing:.1f}% no op or gap accounts for" if missing >= 0.5 else "") + ".</p>")
    row_h = 18
    legend, legend_h = _legend([(f"inside {p.delegate}", _INSIDE), (f"outside {p.delegate}", _OUTSIDE)] if p.delegate
                               else [("no delegate", "#616161")], 10 + len(rows) * row_h + 12)
    height = 10 + len(rows) * row_h + legend_h + 4
    ident = "profile-" + "".join(ch if ch.isalnum() else "-" for ch in title)
    parts = [f'<svg id="{esc(ident)}" class="profile-chart" width="{_WIDTH}" height="{height}" role="img" '
             f'aria-label="time per op of {esc(title)}">']
    top_share = max([p.percent(us) for *_, us in rows] + [1e-9])
    values = [f"{p.percent(us):.1f}% ({us / 1e3:.3f} ms)" for *_, us in rows]
    bar_w = _WIDTH - _LABEL_W - 12 - max(len(v) for v in values) * CHAR_W  # room for the value after the bar
    inside = {o.op for o in p.ops if o.inside}
    for i, (op, where, n, us) in enumerate(rows):
        y = 10 + i * row_h
        share = p.percent(us)
        w = share / top_share * bar_w
        label = f"{op} ×{n}" if n > 1 else op
        parts.append(f'<text x="{_LABEL_W - 6}" y="{y + 13}" text-anchor="end">{esc(_cut(label, int((_LABEL_W - 12) / CHAR_W)))}'
                     f"<title>{esc(label)} on {esc(where)}</title></text>")
        color = ("#9e9e9e" if i >= len(rows) - len(extra) else _INSIDE if op in inside and p.delegate
                 else _OUTSIDE if p.delegate else "#616161")
        parts.append(f'<rect x="{_LABEL_W}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="{color}" opacity="0.8"/>')
        parts.append(f'<text class="value" x="{_LABEL_W + w + 4:.1f}" y="{y + 13}" style="font-size:10px">'
                     f"{values[i]}</text>")
    parts.append(legend)
    parts.append("</svg>")
    warning = p.warning()
    return head + "".join(parts) + (f'<p class="bad">{esc(warning)}</p>' if warning else "")


def diagnosis_html(d: dict[str, Any]) -> str:
    title = f"{esc(d.get('candidate', 'int8'))} ({esc(d.get('runtime', 'onnxruntime'))})"
    if d.get("reason"):
        return f"<h3>{title}</h3><p>No per-op answer: {esc(d['reason'])}</p>"
    rows = "".join(f"<tr><td>{esc(s['op'])}</td><td>{s['fp32_us'] / 1e3:.3f}</td><td>{s['int8_us'] / 1e3:.3f}</td></tr>"
                   for s in (d.get("slower_ops") or [])[:8])
    items = []
    if d.get("fell_out"):
        items.append("fell out of the delegate in int8: " + ", ".join(f"{op} ×{n}" for op, n in d["fell_out"].items()))
    if d.get("layout_ops"):
        items.append("more layout/dtype conversions in int8: "
                     + ", ".join(f"{op} {a} → {b}" for op, (a, b) in d["layout_ops"].items()))
    if d.get("unfused_qdq"):
        items.append(f"{d['unfused_qdq']} quantize/dequantize op(s) left unfused, e.g. "
                     + ", ".join(d.get("unfused_examples", [])[:3]))
    items.append(f"CPU: {d.get('cpu')} — " + ("has int8 dot-product instructions" if d.get("int8_instructions")
                                             else "no VNNI/dot-product instructions"))
    return (f"<h3>{title}</h3><table><tr><th>op slower in int8</th><th>fp32 ms</th><th>int8 ms</th></tr>{rows}</table>"
            + "<ul>" + "".join(f"<li>{esc(t)}</li>" for t in items) + "</ul>")


def _budget_text(policy: dict[str, Any], labelled: bool, measure: dict[str, Any] | None = None) -> str:
    """The budget the verdicts used: the task's measure, top-1 drop on labelled data, else mean cosine (as
    ``verify.assess`` decides)."""
    if not policy:
        return "-"
    if measure and measure.get("rule") != "cosine":
        return f"{measure['measure']} drop ≤ {policy.get('max_drop_points')}{' points' if measure.get('percent') else ''}"
    if measure:
        return f"mean cosine to the float outputs ≥ {policy.get('min_cosine')} ({measure['measure']} reported)"
    if labelled:
        return f"top-1 drop ≤ {policy.get('max_drop_points')} points"
    return f"mean cosine to the float outputs ≥ {policy.get('min_cosine')}"


def _fmt(value: Any, suffix: str = "", digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}{suffix}" if isinstance(value, float) else f"{value}{suffix}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
