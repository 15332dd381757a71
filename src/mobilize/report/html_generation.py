"""report.html's part for decoders (task ``generation``): decode tokens/s (y) against the perplexity increase over
the float model (x, with its 95% interval), each file a numbered marker keyed in a table beside the chart, and the
results table with the terminal's columns (:mod:`token_table`) plus TTFT, memory and the SQNRs.  The axes' ranges
are set by the points (an interval wider than the chart is cut at its edge); a broken or failed file is not
plotted, only listed.

    >>> html = body({"variants": [], "reference_variant": "eager-fp32"})
    >>> "No decoder file was both timed and judged" in html and "<table" in html
    True
"""

from __future__ import annotations

from typing import Any

from mobilize.report.html_charts import CHAR_W, LABEL_H, nice_ticks, place_labels, tick_text
from mobilize.report.html_parts import cell, esc, outcome_cell, rule_cell, table
from mobilize.report.token_table import COLUMNS, legend_lines, ordered, ppl_text, tokens

PLOTTED = {"OK": "#1565c0", "OVER_BUDGET": "#e65100", "VACUOUS": "#757575"}
"""The outcomes a file is plotted with, and their colours: a MISMATCH or failed file has no trade-off to show."""

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 760, 400, 78, 20, 24, 56


def setup(report: dict[str, Any]) -> str:
    gen = report.get("generation") or {}
    params = gen.get("parameters")
    return (f"Plan <b>{esc(report.get('plan'))}</b>, held-out text <b>{esc(gen.get('held_out', '?'))}</b>"
            + (f", {params:,} parameters" if params else "")
            + (f", vocabulary {gen['vocab_size']:,}" if gen.get("vocab_size") else "")
            + f"; a {esc(gen.get('prompt_tokens', '?'))}-token prompt, then {esc(gen.get('gen_tokens', '?'))} "
              f"decoded tokens fed the same ids in every runtime; {esc(report.get('threads'))} thread(s), "
              f"{esc(report.get('rounds'))} interleaved rounds.")


def body(report: dict[str, Any]) -> str:
    """The decoder chart with its key, then the results table and what its columns are."""
    rows = ordered(report["variants"])
    points = [v for v in rows if v["outcome"] in PLOTTED and tokens(v).get("decode_tokens_per_s")
              and tokens(v).get("ppl_increase_percent") is not None]
    legend = "".join(f"<br>{esc(line)}" for line in legend_lines(report)).removeprefix("<br>")
    return (f"<h2>Decode speed vs perplexity</h2>{chart(points, report)}{key(points, rows)}"
            f"<h2>Results</h2><div class=\"wide\">{results_table(rows)}</div><p class=\"muted\">{legend}</p>")


def results_table(rows: list[dict[str, Any]]) -> str:
    """One row per file, fastest per token first: every column of :data:`token_table.COLUMNS`."""
    special = {"outcome": outcome_cell, "rule": rule_cell}
    body = [[special[c.head](v) if c.head in special else cell(c.cell(v), "l" if c.left else "") for c in COLUMNS]
            for v in rows]
    return table([c.head for c in COLUMNS], body, id="results", titles=[c.title for c in COLUMNS],
                 left=[c.head for c in COLUMNS if c.left])


def key(points: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    """The chart's key: each marker's number, its file and figures; then the files not plotted and why."""
    body = [[str(i), v["name"], outcome_cell(v), f"{tokens(v)['decode_tokens_per_s']:.0f}", ppl_text(v)]
            for i, v in enumerate(points, 1)]
    out = (table(["#", "variant", "outcome", "tok/s", "ppl +% (95% CI)"], body, id="tokens-key", left=("variant", "outcome"))
           if body else "")
    left = [f"{v['name']} ({v['outcome']})" for v in rows if v not in points]
    if left:
        out += (f'<p class="muted">Not plotted: {esc(", ".join(left))}: a broken, failed or unmeasured file has no '
                f"trade-off to show (its row is in the results table).</p>")
    return out


def chart(points: list[dict[str, Any]], report: dict[str, Any]) -> str:
    """The SVG: tick values on both axes, a marker per file numbered as in :func:`key`, perplexity whiskers cut at
    the chart's edge, the zero and the budget lines where they fall inside the range."""
    if not points:
        return "<p>No decoder file was both timed and judged: no chart.</p>"
    xs = [tokens(v)["ppl_increase_percent"] for v in points]
    ys = [tokens(v)["decode_tokens_per_s"] for v in points]
    xt = nice_ticks(min(xs) - max(0.08 * (max(xs) - min(xs)), 0.1), max(xs) + max(0.08 * (max(xs) - min(xs)), 0.1))
    pad = 0.06 * (max(ys) - min(ys) or max(ys))
    yt = nice_ticks(max(0.0, min(ys) - pad), max(ys) + pad)  # a rate is never below 0

    def px(x: float) -> float:
        return LEFT + (min(max(x, xt[0]), xt[-1]) - xt[0]) / (xt[-1] - xt[0]) * (WIDTH - LEFT - RIGHT)

    def py(y: float) -> float:
        return HEIGHT - BOTTOM - (y - yt[0]) / (yt[-1] - yt[0]) * (HEIGHT - TOP - BOTTOM)

    parts = [f'<svg id="tokens-chart" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="decode tokens/s vs perplexity increase">', *_axes(xt, yt, px, py)]
    marks, boxes = _guides(report, xt, px)
    parts += marks
    for v in points:
        parts += _whisker(v, xt, px, py(tokens(v)["decode_tokens_per_s"]))
    centres = [(str(i), px(x), py(y)) for i, (x, y) in enumerate(zip(xs, ys), 1)]
    boxes += [(cx - 5, cy - 5, cx + 5, cy + 5) for _, cx, cy in centres]
    frame = [(0, 0, WIDTH, TOP), (0, HEIGHT - BOTTOM, WIDTH, HEIGHT), (0, 0, LEFT, HEIGHT)]
    labels = place_labels(centres, WIDTH - RIGHT, HEIGHT, obstacles=frame + boxes)
    for (name, cx, cy), v in zip(centres, points):
        t = tokens(v)
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{PLOTTED[v["outcome"]]}"><title>'
                     f'{name}. {esc(v["name"])}: {t["decode_tokens_per_s"]:.0f} tokens/s, perplexity '
                     f'{esc(ppl_text(v))}% ({v["outcome"]})</title></circle>')
        x, y, anchor = labels[name]
        parts.append(f'<text class="point-label" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{name}</text>')
    parts.append("</svg>")
    colours = ", ".join(f'<span style="color:{c}">●</span> {o}' for o, c in PLOTTED.items())
    return "".join(parts) + (f'<p class="muted">Each marker is a file, numbered as in the key below ({colours}); '
                             f"whiskers: the perplexity increase's 95% interval (cut at the chart's edge where wider); "
                             f"up is faster, left is closer to the float model.</p>")


def _axes(xt: list[float], yt: list[float], px, py) -> list[str]:
    """Both axes with their tick values, grid lines and titles."""
    base, mid_y = HEIGHT - BOTTOM, (TOP + HEIGHT - BOTTOM) / 2
    out = [f'<line x1="{LEFT}" y1="{base}" x2="{WIDTH - RIGHT}" y2="{base}" stroke="#888"/>',
           f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}" stroke="#888"/>']
    for t in xt:
        out.append(f'<line x1="{px(t):.1f}" y1="{TOP}" x2="{px(t):.1f}" y2="{base + 4}" stroke="#eee"/>'
                   f'<text class="tick-x" x="{px(t):.1f}" y="{base + 16}" text-anchor="middle">{tick_text(t, xt)}</text>')
    for t in yt:
        out.append(f'<line x1="{LEFT - 4}" y1="{py(t):.1f}" x2="{WIDTH - RIGHT}" y2="{py(t):.1f}" stroke="#eee"/>'
                   f'<text class="tick-y" x="{LEFT - 7}" y="{py(t) + 4:.1f}" text-anchor="end">{tick_text(t, yt)}</text>')
    out += [f'<text class="axis" x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 12}" text-anchor="middle">'
            f'perplexity increase vs float (%)</text>',
            f'<text class="axis" x="16" y="{mid_y:.0f}" transform="rotate(-90 16 {mid_y:.0f})" '
            f'text-anchor="middle">decode tokens/s</text>']
    return out


def _guides(report: dict[str, Any], xt: list[float], px) -> tuple[list[str], list[tuple[float, ...]]]:
    """The zero line and the budget line (with its label) where they fall inside the x range, and the boxes their
    labels take (the markers' numbers keep off them)."""
    out, boxes = [], []
    if xt[0] < 0 < xt[-1]:
        out.append(f'<line x1="{px(0):.1f}" y1="{TOP}" x2="{px(0):.1f}" y2="{HEIGHT - BOTTOM}" stroke="#999" '
                   f'stroke-dasharray="2,3"/>')
    budget = (report.get("policy") or {}).get("max_ppl_increase_percent")
    if budget is not None and xt[0] < budget < xt[-1]:
        text = f"budget +{budget:g}%"
        x = px(budget)
        out.append(f'<line class="budget" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" '
                   f'stroke="#e65100" stroke-dasharray="5,3"/>'
                   f'<text class="budget-label" x="{x - 4:.1f}" y="{TOP + 12}" text-anchor="end">{text}</text>')
        boxes.append((x - 4 - len(text) * CHAR_W, TOP + 12 - LABEL_H + 3, x, TOP + 15))
    return out, boxes


def _whisker(v: dict[str, Any], xt: list[float], px, y: float) -> list[str]:
    """The perplexity increase's 95% interval as a horizontal line, capped where it ends inside the range."""
    t = tokens(v)
    low, high = t.get("ppl_increase_percent_low"), t.get("ppl_increase_percent_high")
    if low is None or high is None:
        return []
    out = [f'<line class="ci" x1="{px(low):.1f}" x2="{px(high):.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#999"/>']
    for end in (low, high):
        if xt[0] <= end <= xt[-1]:
            out.append(f'<line class="ci" x1="{px(end):.1f}" x2="{px(end):.1f}" y1="{y - 4:.1f}" y2="{y + 4:.1f}" '
                       f'stroke="#999"/>')
    return out
