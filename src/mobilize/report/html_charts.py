"""report.html's charts of a measured task (classification, embedding, detection, ...): latency with its p10-p90
whiskers, latency vs accuracy with 95% intervals and the Pareto front, sizes; and the label placement every chart
uses (no label over another, checked in a browser by tests/report/test_html_browser.py).

    >>> pareto_front([("fp32", 2.0, 99.0), ("int8", 1.0, 98.0), ("fp16", 1.5, 97.0)])
    ['int8', 'fp32']
"""

from __future__ import annotations

import math

from mobilize.report.html_parts import esc

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
    # off the front: accuracy against a reference that tells nothing (VACUOUS), and files that are broken
    off = {v["name"]: "VACUOUS" if _vacuous(v) else v["outcome"] for v in timed
           if _vacuous(v) or v.get("outcome", "OK") not in FRONT_OUTCOMES}
    front = pareto_front([p for p in pts if p[0] not in off], resolution)
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
        if px(tick) - 4 * len(f"{tick:g}") < pad:  # its label would cross the y axis, onto the lowest accuracy's
            continue
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
        color = "#2e7d32" if on else "#b00020" if off.get(name, "VACUOUS") != "VACUOUS" else "#1565c0"
        parts.append(f'<circle cx="{px(lat):.1f}" cy="{py(acc):.1f}" r="{6 if on else 4}" fill="{color}"/>')
        x, y, anchor = labels[f"{name}{' ★' if on else ''}"]
        parts.append(f'<text class="point-label" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">'
                     f'{esc(name)}{" ★" if on else ""}</text>')
    parts.append("</svg>")
    return "".join(parts) + front_note(front, off)


FRONT_OUTCOMES = ("OK", "OVER_BUDGET")
"""The outcomes a Pareto point may have: a working file, within the budget or not (a MISMATCH file is broken, not
a trade-off; a VACUOUS one's accuracy says nothing)."""


def front_note(front: list[str], off: dict[str, str]) -> str:
    """Under the chart: who is on the front, and who is left off it and why (``off``: name -> outcome)."""
    vacuous = sorted(n for n, o in off.items() if o == "VACUOUS")
    broken = sorted(f"{n} ({o})" for n, o in off.items() if o != "VACUOUS")
    left = ((f" Not on it: {esc(', '.join(vacuous))} (VACUOUS: their accuracy says nothing)." if vacuous else "")
            + (f" Not on it: {esc(', '.join(broken))}: red, a broken or failed file is no trade-off." if broken
               else ""))
    if not front and vacuous and not broken:
        return ('<p class="muted">No Pareto front: every accuracy figure here is measured against a reference whose '
                'output does not depend on its input (VACUOUS, rule vacuous-reference), so no variant is more '
                'accurate than another.</p>')
    if not front:
        return f'<p class="muted">No Pareto front: no plotted file is OK or over budget.{left}</p>'
    return (f'<p class="muted">★ Pareto front: no other variant is both faster and more accurate '
            f'({esc(", ".join(front))}). Points whose intervals overlap are not distinguishable on these '
            f'samples.{left}</p>')


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


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (steps of 1, 2 or 5 times a power of ten) from at or below ``lo`` to at or above ``hi``,
    about ``count`` of them: the axis's range is the first tick to the last.

        >>> nice_ticks(0.3, 7.8)
        [0.0, 2.0, 4.0, 6.0, 8.0]
    """
    if not hi > lo:
        lo, hi = lo - 0.5, hi + 0.5
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [float(round(k * step, 12)) for k in range(first, last + 1)]


def tick_text(value: float, ticks: list[float]) -> str:
    """A tick's label with the decimals its step needs (``0.5``, ``1200``)."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    digits = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{value + 0.0:.{digits}f}"
