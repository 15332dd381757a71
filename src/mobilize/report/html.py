"""report.html: one self-contained file (inline SVG and CSS, no scripts or network) with the
latency chart (p10–p90 whiskers), latency vs accuracy with the Pareto front, sizes and notes.
"""

from __future__ import annotations

import html
import math
from typing import Any

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}
td:first-child,th:first-child,td.l{text-align:left}.bad{color:#b00020;font-weight:600}.ok{color:#1b5e20}
svg text{font:11px system-ui,sans-serif}.muted{color:#666}
"""


def esc(value: Any) -> str:
    return html.escape(str(value))


def pareto_front(points: list[tuple[str, float, float]], resolution: float = 0.0) -> list[str]:
    """Names of the points no faster point matches on accuracy.  A slower point joins the front only when it is
    more accurate by more than ``resolution`` (what the measure can tell apart: cosine 1.0 and 0.9999999999996
    are a tie, not two stars)."""
    front, best = [], -math.inf
    for name, latency, accuracy in sorted(points, key=lambda p: (p[1], -p[2])):
        if accuracy - best > resolution:
            front.append(name)
            best = accuracy
    return front


def latency_chart(variants: list[dict]) -> str:
    rows = [v for v in variants if v.get("latency_ms_p50")]
    if not rows:
        return "<p>No variant was timed.</p>"
    rows.sort(key=lambda v: v["latency_ms_p50"])
    width, left, bar_h = 760, 170, 22
    top = max(v.get("latency_ms_p90") or v["latency_ms_p50"] for v in rows) * 1.1
    scale = (width - left - 70) / top
    h = len(rows) * bar_h + 30
    parts = [f'<svg id="latency-chart" width="{width}" height="{h}" role="img" aria-label="latency p50 with p10-p90">']
    for i, v in enumerate(rows):
        y = 10 + i * bar_h
        p10, p50, p90 = (v.get("latency_ms_p10") or v["latency_ms_p50"]), v["latency_ms_p50"], (v.get("latency_ms_p90") or v["latency_ms_p50"])
        color = "#1565c0" if v["outcome"] == "OK" else "#b00020"
        parts.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{esc(v["name"])}</text>')
        parts.append(f'<rect x="{left}" y="{y + 4}" width="{p50 * scale:.1f}" height="{bar_h - 8}" fill="{color}" opacity="0.75"/>')
        parts.append(f'<line x1="{left + p10 * scale:.1f}" x2="{left + p90 * scale:.1f}" y1="{y + 11}" y2="{y + 11}" stroke="#000"/>')
        for xv in (p10, p90):
            parts.append(f'<line x1="{left + xv * scale:.1f}" x2="{left + xv * scale:.1f}" y1="{y + 6}" y2="{y + 16}" stroke="#000"/>')
        parts.append(f'<text x="{left + p90 * scale + 6:.1f}" y="{y + 14}">{p50:.2f} ms</text>')
    parts.append(f'<text x="{left}" y="{h - 4}" class="muted">bars: p50; whiskers: p10–p90 (ms)</text></svg>')
    return "".join(parts)


CHAR_W, LABEL_H = 6.6, 13.0
"""Estimated width of one character and height of a label at the chart's 11 px font (checked in a browser test)."""


def wilson(p_percent: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of an accuracy (percent) on n samples."""
    if not n:
        return (p_percent, p_percent)
    p = p_percent / 100.0
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (100 * (center - half), 100 * (center + half))


def _latency_interval(v: dict) -> tuple[float, float]:
    meds = sorted(v.get("latency_ms_round_medians") or [])
    return (meds[0], meds[-1]) if meds else (v["latency_ms_p50"], v["latency_ms_p50"])


def place_labels(points: list[tuple[str, float, float]], width: float, height: float,
                 obstacles: list[tuple[float, float, float, float]] = ()) -> dict[str, tuple[float, float, str]]:
    """Greedy label placement: each label (x, y, anchor) goes to the first candidate spot around its point
    that overlaps no label placed before it and stays inside the chart."""
    boxes = list(obstacles)
    placed: dict[str, tuple[float, float, str]] = {}
    offsets = [(8, -6), (8, 14), (-8, -6), (-8, 14)] + [(dx, dy) for k in range(1, 12) for dy in (-6 - 14 * k, 14 + 14 * k)
                                                        for dx in (8, -8)]
    for name, x, y in sorted(points, key=lambda p: (p[2], p[1])):
        w = len(name) * CHAR_W
        choice = None
        for dx, dy in offsets:
            left = x + dx if dx > 0 else x + dx - w
            box = (left, y + dy - LABEL_H + 3, left + w, y + dy + 3)
            if box[0] < 0 or box[2] > width or box[1] < 0 or box[3] > height:
                continue
            if not any(_overlap(box, b) for b in boxes):
                choice = (x + dx, y + dy, "start" if dx > 0 else "end", box)
                break
        if choice is None:  # crowded: stack below the plot's last label column
            top = max((b[3] for b in boxes), default=0) + LABEL_H
            choice = (x + 8, min(top, height - 2), "start", (x + 8, top - LABEL_H, x + 8 + w, top))
        boxes.append(choice[3])
        placed[name] = choice[:3]
    return placed


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def accuracy_chart(variants: list[dict], metric: str) -> str:
    """Latency (x, log) vs accuracy (y) with 95% intervals on both axes and the Pareto front.

    Long because it is one SVG drawn in order (axes, ticks, interval bars, points, front, labels)."""
    timed = [v for v in variants if v.get("latency_ms_p50") and v.get("accuracy")]
    pts, bars = [], {}
    for v in timed:
        acc = v["accuracy"]
        tm = acc.get("task_measure") or {}
        value = tm.get("value") if metric == "task" else acc.get(metric)
        if value is None or not math.isfinite(value):
            continue
        if metric == "top1":
            lo, hi = wilson(value, acc.get("samples") or 0)
        elif metric == "task":  # the float model's figure minus the drop's interval
            ci = tm.get("drop_ci95")
            lo, hi = (tm["reference"] - ci[1], tm["reference"] - ci[0]) if ci else (value, value)
        else:
            lo, hi = acc.get("cosine_ci95") or (value, value)
        pts.append((v["name"], v["latency_ms_p50"], value))
        bars[v["name"]] = (_latency_interval(v), (lo, hi))
    if not pts:
        return "<p>No accuracy figures to plot.</p>"
    # what the measure tells apart: one sample of a percentage, or the cosine's 5 printed digits
    tm = next((v["accuracy"]["task_measure"] for v in timed if v["accuracy"].get("task_measure")), {})
    percent = metric == "top1" or (metric == "task" and tm.get("percent"))
    resolution = (100.0 / max(min(v["accuracy"].get("samples") or 1 for v in timed), 1) if percent
                  else 1e-5 if metric == "cosine" else 0.0)
    vacuous = {v["name"] for v in timed if _vacuous(v)}  # accuracy against a reference that tells nothing
    front = pareto_front([p for p in pts if p[0] not in vacuous], resolution)
    width, height, pad = 760, 380, 60
    xs = [math.log10(x) for p in pts for x in (bars[p[0]][0])]
    ys = [y for p in pts for y in bars[p[0]][1]]
    x0, x1 = min(xs) - 0.1, max(xs) + 0.25
    y0, y1 = min(ys), max(ys)
    y0, y1 = (y0 - 1, y1 + 1) if y1 - y0 < 1e-9 else (y0 - 0.1 * (y1 - y0), y1 + 0.15 * (y1 - y0))
    # the axis stays within the measure's range (a user's metric has none we know)
    floor, ceiling = (0.0, 100.0) if percent else (-1.0, 1.0) if metric == "cosine" else (-math.inf, math.inf)
    y0, y1 = max(y0, floor), min(y1, ceiling)
    if y1 <= y0:
        y0 = max(floor, y1 - 1e-6)
    px = lambda x: pad + (math.log10(x) - x0) / (x1 - x0) * (width - 2 * pad)  # noqa: E731
    py = lambda y: height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad)  # noqa: E731
    label = ("top-1 %" if metric == "top1" else "mean cosine to the float model" if metric == "cosine"
             else f"{tm.get('measure')}{' (%)' if percent else ''} vs the float model")
    parts = [f'<svg id="pareto-chart" width="{width}" height="{height}" role="img" aria-label="latency vs accuracy">',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#888"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#888"/>',
             f'<text class="axis" x="{width / 2}" y="{height - 15}" text-anchor="middle">p50 latency (ms, log scale; '
             f'whiskers: range of round medians)</text>',
             f'<text class="axis" x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" text-anchor="middle">'
             f'{esc(label)} (95% interval)</text>',
             f'<text class="axis" x="{pad - 4}" y="{height - pad + 4}" text-anchor="end">{y0:.4g}</text>',
             f'<text class="axis" x="{pad - 4}" y="{pad + 4}" text-anchor="end">{y1:.4g}</text>']
    for tick in _log_ticks(10 ** x0, 10 ** x1):
        parts.append(f'<text class="axis" x="{px(tick):.1f}" y="{height - pad + 16}" text-anchor="middle">{tick:g}</text>')
    front_pts = sorted((p for p in pts if p[0] in front), key=lambda p: p[1])
    path = " ".join(f"{px(p[1]):.1f},{py(p[2]):.1f}" for p in front_pts)
    if front_pts:
        parts.append(f'<polyline class="pareto-front" points="{path}" fill="none" stroke="#2e7d32" stroke-width="2" '
                     f'stroke-dasharray="5,3"/>')
    for name, lat, acc in pts:
        (lx0, lx1), (ay0, ay1) = bars[name]
        parts.append(f'<line class="ci" x1="{px(lx0):.1f}" x2="{px(lx1):.1f}" y1="{py(acc):.1f}" y2="{py(acc):.1f}" '
                     f'stroke="#999"/>')
        parts.append(f'<line class="ci" x1="{px(lat):.1f}" x2="{px(lat):.1f}" y1="{py(ay0):.1f}" y2="{py(ay1):.1f}" '
                     f'stroke="#999"/>')
    labels = place_labels([(f"{n}{' ★' if n in front else ''}", px(lat), py(acc)) for n, lat, acc in pts], width, height,
                          obstacles=[(0, height - pad, width, height), (0, 0, pad, height)])
    for name, lat, acc in pts:
        on = name in front
        parts.append(f'<circle cx="{px(lat):.1f}" cy="{py(acc):.1f}" r="{6 if on else 4}" '
                     f'fill="{"#2e7d32" if on else "#1565c0"}"/>')
        x, y, anchor = labels[f"{name}{' ★' if on else ''}"]
        parts.append(f'<text class="point-label" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">'
                     f'{esc(name)}{" ★" if on else ""}</text>')
    parts.append("</svg>")
    if not front:
        return "".join(parts) + ('<p class="muted">No Pareto front: every accuracy figure here is measured against '
                                 'a reference whose output does not depend on its input (VACUOUS, rule '
                                 'vacuous-reference), so no variant is more accurate than another.</p>')
    return "".join(parts) + (f'<p class="muted">★ Pareto front: no other variant is both faster and more accurate '
                             f'({esc(", ".join(front))}). Points whose intervals overlap are not distinguishable on '
                             f'these samples.' + (f' Not on it: {esc(", ".join(sorted(vacuous)))} (VACUOUS: their '
                             f'accuracy says nothing).' if vacuous else '') + '</p>')


def _vacuous(variant: dict) -> bool:
    """The variant's accuracy is against a degenerate reference (its verdict is VACUOUS)."""
    return "VACUOUS" in (variant.get("outcome"), (variant.get("verdict") or {}).get("outcome"))


def _log_ticks(lo: float, hi: float) -> list[float]:
    ticks = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            t = m * 10**e
            if lo <= t <= hi:
                ticks.append(t)
    return ticks


def size_chart(variants: list[dict]) -> str:
    rows = [v for v in variants if v.get("size_bytes")]
    if not rows:
        return "<p>No sizes.</p>"
    width, left, bar_h = 760, 170, 20
    top = max(v["size_bytes"] for v in rows)
    scale = (width - left - 80) / top
    parts = [f'<svg id="size-chart" width="{width}" height="{len(rows) * bar_h + 10}" role="img" aria-label="sizes">']
    for i, v in enumerate(sorted(rows, key=lambda v: v["size_bytes"])):
        y = 5 + i * bar_h
        parts.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{esc(v["name"])}</text>')
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{v["size_bytes"] * scale:.1f}" height="{bar_h - 6}" fill="#6a1b9a" opacity="0.7"/>')
        parts.append(f'<text x="{left + v["size_bytes"] * scale + 6:.1f}" y="{y + 13}">{v["size_bytes"] / 1e6:.2f} MB</text>')
    return "".join(parts) + "</svg>"


def _result_rows(variants: list[dict[str, Any]], frames: bool) -> str:
    """The results table's rows, fastest first (with compare --frames' frame-to-answer columns when timed)."""
    from mobilize.report.terminal import (
        drop_text, fidelity_text, file_text, interface_text, measure_text, speed_text, sqnr_text,
    )

    rows = []
    for v in sorted(variants, key=lambda v: v.get("latency_ms_p50") or math.inf):
        acc = v.get("accuracy") or {}
        cls = "ok" if v["outcome"] == "OK" else "bad"
        verdict = v.get("verdict") or {}
        cells = [v.get("format"), v.get("runtime"), interface_text(v),
                 "on device only" if v.get("on_device_only") else _num(v.get("latency_ms_p50")), file_text(v),
                 _num(v.get("latency_ms_p90")), speed_text(v),
                 *([_num((v.get("frames") or {}).get("latency_ms_p50")), speed_text(v.get("frames") or {})]
                   if frames else []),
                 _num(v["size_bytes"] / 1e6 if v.get("size_bytes") else None), fidelity_text(v),
                 measure_text(acc, 2, v), drop_text(acc), _num(acc.get("cosine"), digits=5), sqnr_text(acc),
                 _num(acc.get("max_abs"), digits=3), v.get("ran_in") or v.get("kind")]
        arm = v.get("arm64") or {}
        differs = f' <b class="bad">(arm64 {esc(arm.get("outcome"))})</b>' if arm.get("differs_from_host") else ""
        rows.append(f'<tr><td>{esc(v["name"])}</td><td class="l {cls}">{esc(v["outcome"])}'
                    f'{" (" + esc(v["stage"]) + ")" if v.get("stage") else ""}{differs}</td>'
                    + "".join(f"<td>{esc(c) if c is not None else '-'}</td>" for c in cells)
                    + f'<td class="l" title="{esc(verdict.get("reason", ""))}">{esc(verdict.get("rule", "-"))}</td></tr>')
    return "".join(rows)


def render_html(report: dict[str, Any]) -> str:
    from mobilize.report.terminal import measure_column, summary_lines, unit_legend

    variants = report["variants"]
    column = measure_column(report)
    metric = chart_measure(report)
    frames = bool(report.get("frames"))
    frame_heads = ('<th title="frame to answer: the camera pipeline, conversion included">frame ms</th>'
                   '<th>frame x</th>') if frames else ""
    rows = [_result_rows(variants, frames)]
    verdicts = "".join(f'<li><b>{esc(v["name"])}</b>: {esc(v["outcome"])} — {esc((v.get("verdict") or {}).get("reason"))}</li>'
                       for v in variants if v.get("verdict"))
    if report.get("reference_warning"):
        verdicts = f'<li class="bad">{esc(report["reference_warning"])}</li>' + verdicts
    notes = "".join(f'<h3>{esc(v["name"])}</h3><ul>' + "".join(f"<li>{esc(n)}</li>" for n in v.get("notes") or [])
                    + "</ul>" for v in variants if v.get("notes"))
    status = "" if report.get("complete") else '<p class="bad">Partial report: the run was interrupted or is still going.</p>'
    summary = "".join(f"<p><b>{esc(line)}</b></p>" if i == 0 else f"<p>{esc(line)}</p>"
                      for i, line in enumerate(summary_lines(report)))
    extra = "".join(section(report) for section in EXTRA_SECTIONS)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mobilize compare: {esc(report['model'])}</title>
<style>{CSS}</style></head><body>
<h1>mobilize compare — {esc(report['model'])}</h1>
<p>Plan <b>{esc(report['plan'])}</b>, data <b>{esc(report.get('data'))}</b> ({esc(report.get('accuracy_samples', '?'))} samples),
{esc(report['threads'])} thread(s), {esc(report['rounds'])} interleaved rounds, {esc(report['iterations'])} timed iterations per variant.
Generated {esc(report.get('created', ''))} by mobilize {esc(report.get('mobilize_version', ''))}.</p>
{status}{summary}
<h2>Latency</h2>{latency_chart(variants)}
<h2>Latency vs accuracy ({esc(CHART_TITLES.get(metric) or column.removesuffix(' %'))})</h2>{accuracy_chart(variants, metric)}
<h2>Results</h2><table><tr><th>variant</th><th>outcome</th><th>format</th><th>runtime</th><th>interface</th><th>p50 ms</th><th>p50 file</th><th>p90 ms</th>
<th>speedup</th>{frame_heads}<th>size MB</th><th title="the file vs the model it was exported from">fidelity</th><th>{esc(column)}</th><th>drop</th><th>cosine</th><th>SQNR dB</th><th>max abs</th><th>ran in</th><th>rule</th></tr>
{''.join(rows)}</table>
<p class="muted">~ marks a difference inside its 95% interval of no difference: a tie. Speed-ups are against
{esc(report.get('reference_variant'))}, from paired round medians. Fidelity: the file vs the model it was exported from
(its exporter's promise; - : no file). {esc(column.removesuffix(' %'))}, drop, cosine, SQNR, max abs and rule: quality vs
the float model on the data (the budget). {esc(unit_legend(report))}.</p>
<h2>Verdicts</h2><ul>{verdicts or '<li>None yet.</li>'}</ul>
{extra}
<h2>Sizes</h2>{size_chart(variants)}
<h2>Notes</h2>{notes or '<p>None.</p>'}
</body></html>
"""


CHART_TITLES = {"top1": "top-1", "cosine": "cosine"}


def chart_measure(report: dict[str, Any]) -> str:
    """What the accuracy chart plots: top-1 for a labelled classifier, the task's measure, else the cosine."""
    accs = [v.get("accuracy") or {} for v in report["variants"]]
    if any(a.get("task_measure") and a["task_measure"].get("value") is not None
           and a["task_measure"].get("rule") != "cosine" for a in accs):
        return "task"
    if report.get("labelled") and (report.get("task") or {}).get("name") in (None, "classification"):
        return "top1"
    return "cosine"


def lint_section(report: dict[str, Any]) -> str:
    """The architecture lint and the per-layer profile of the float model (mobilize.lint)."""
    if not report.get("lint"):
        return ""
    from mobilize.lint.html import render_fragment

    return "<h2>Architecture lint and per-layer profile</h2>" + render_fragment(report["lint"])


def compression_section(report: dict[str, Any]) -> str:
    """Parameters, MACs and sparsity of every variant a prune step changed, beside its speed and accuracy."""
    from mobilize.report.terminal import measure_column, measure_text

    rows = [v for v in report["variants"] if v.get("prune")]
    if not rows:
        return ""
    cells = []
    for v in rows:
        p, acc = v["prune"], v.get("accuracy") or {}
        cells.append("<tr>" + "".join(f"<td>{esc(c) if c is not None else '-'}</td>" for c in (
            v["name"], p.get("method"), f"{p.get('params_before', 0):,} → {p.get('params_after', 0):,}",
            f"{p.get('macs_before', 0):,} → {p.get('macs_after', 0):,}", _num(p.get("sparsity_percent"), "%"),
            _num(v.get("latency_ms_p50")), measure_text(acc, 2))) + "</tr>")
    return ("<h2>Compression</h2><table><tr><th>variant</th><th>method</th><th>parameters</th><th>MACs</th>"
            f"<th>sparsity</th><th>p50 ms</th><th>{esc(measure_column(report))}</th></tr>" + "".join(cells) + "</table>"
            '<p class="muted">Unstructured sparsity leaves every tensor dense: dense runtimes multiply the zeros, so '
            "only structured pruning changes MACs and speed.</p>")


def arm64_section(report: dict[str, Any]) -> str:
    """Each file's check on arm64 kernels under QEMU beside the host's (compare --verify-on arm64)."""
    checked = [v for v in report["variants"] if v.get("arm64")]
    if not checked:
        return ""
    rows = []
    for v in checked:
        a = v["arm64"]
        agree = a.get("agreement_with_host") or {}
        sq = lambda verdict: _num(((verdict or {}).get("numbers") or {}).get("sqnr_db"), digits=1)  # noqa: E731
        feats = ", ".join(k for k, on in (a.get("cpu_features") or {}).items() if on)
        top1 = agree.get("top1_agreement")
        cells = [a.get("host_outcome"), sq(a.get("host_verdict")), sq(a.get("verdict")),
                 "exact" if agree.get("exact") else _num(agree.get("sqnr_db"), digits=1), None if top1 is None else f"{top1:.1%}",
                 f'{a.get("qemu_cpu")} ({feats})']
        cls = "bad" if a.get("differs_from_host") else "ok"
        rows.append(f'<tr><td>{esc(v["name"])}</td><td class="l {cls}">{esc(a["outcome"])}'
                    f'{" — differs from host" if a.get("differs_from_host") else ""}</td>'
                    + "".join(f"<td>{esc(c) if c is not None else '-'}</td>" for c in cells)
                    + f'<td class="l">{esc((a.get("verdict") or {}).get("reason"))}</td></tr>')
    versions = ", ".join(f"{k} {ver}" for k, ver in (checked[0]["arm64"].get("versions") or {}).items())
    return f"""<h2>arm64 (QEMU user emulation)</h2>
<p class="muted">Each file run again on the same samples inside an arm64 Debian root with PyPI's aarch64 wheels
({esc(versions)}), judged by the same rules. Emulated outputs are the arm64 kernels'; emulated times are not
latency and are not shown.</p>
<table><tr><th>variant</th><th>arm64 verdict</th><th>host verdict</th><th>host SQNR dB</th><th>arm64 SQNR dB</th>
<th>arm64 vs host SQNR dB</th><th>arm64 vs host top-1</th><th>emulated CPU</th><th>arm64 reason</th></tr>
{''.join(rows)}</table>"""


EXTRA_SECTIONS: list = [lint_section, compression_section, arm64_section]
"""Renderers ``report -> html`` for optional sections."""


def _num(value: Any, suffix: str = "", digits: int = 2) -> str | None:
    if value is None:
        return None
    return f"{value:.{digits}f}{suffix}" if isinstance(value, float) else f"{value}{suffix}"
