"""report.html of a generation compare: the table, and decode tokens/s against the perplexity change (each with
its 95% interval: decode from the paired round ratios against the eager file, perplexity from the bootstrap
over sequences), self-contained (inline SVG, no scripts).

    >>> html = render_generation_html({"model": "zoo:tiny_lm", "variants": [], "recommended": None})
    >>> html.startswith("<!doctype html>") and "tokens/s" in html
    True
"""

from __future__ import annotations

import html as _html
import math
from typing import Any

from mobilize.report.generation_terminal import generation_lines


def _point(v: dict[str, Any]) -> tuple[float, float, float, float, float, float] | None:
    t = v.get("timing") or {}
    q = (v.get("verdict") or {}).get("numbers") or {}
    rate, ppl = t.get("decode_tokens_per_s"), q.get("ppl_increase_percent")
    if not rate or ppl is None:
        return None
    speed = t.get("decode_speedup") or {}
    ratio, low, high = speed.get("ratio"), speed.get("low"), speed.get("high")
    r_low = rate * low / ratio if ratio and low else rate
    r_high = rate * high / ratio if ratio and high and math.isfinite(high) else rate
    return rate, r_low, r_high, ppl, q.get("ppl_increase_percent_low", ppl), q.get("ppl_increase_percent_high", ppl)


def chart(variants: list[dict[str, Any]], width: int = 640, height: int = 360) -> str:
    pts = [(v["name"], v["outcome"], p) for v in variants if (p := _point(v))]
    if not pts:
        return "<p>No file was both timed and judged: no chart.</p>"
    xs = [c for _, _, p in pts for c in p[:3]]
    ys = [c for _, _, p in pts for c in p[3:]]
    x0, x1 = min(xs) * 0.9, max(xs) * 1.1
    y0, y1 = min(ys + [0.0]) - 1, max(ys + [0.0]) + 1
    px = lambda x: 60 + (x - x0) / (x1 - x0 or 1) * (width - 80)  # noqa: E731
    py = lambda y: height - 40 - (y - y0) / (y1 - y0 or 1) * (height - 60)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
           f'<line x1="60" y1="{height - 40}" x2="{width - 20}" y2="{height - 40}" stroke="#333"/>',
           f'<line x1="60" y1="20" x2="60" y2="{height - 40}" stroke="#333"/>',
           f'<line x1="60" y1="{py(0):.1f}" x2="{width - 20}" y2="{py(0):.1f}" stroke="#bbb" stroke-dasharray="4"/>',
           f'<text x="{width / 2:.0f}" y="{height - 8}" text-anchor="middle" font-size="12">decode tokens/s '
           f'(95% CI)</text>',
           f'<text x="14" y="{height / 2:.0f}" transform="rotate(-90 14 {height / 2:.0f})" text-anchor="middle" '
           f'font-size="12">perplexity change % vs float (95% CI)</text>']
    for name, outcome, (r, rl, rh, p, pl, ph) in pts:
        color = "#1a7f37" if outcome == "OK" else "#b35900"
        out += [f'<line x1="{px(rl):.1f}" y1="{py(p):.1f}" x2="{px(rh):.1f}" y2="{py(p):.1f}" stroke="{color}"/>',
                f'<line x1="{px(r):.1f}" y1="{py(pl):.1f}" x2="{px(r):.1f}" y2="{py(ph):.1f}" stroke="{color}"/>',
                f'<circle cx="{px(r):.1f}" cy="{py(p):.1f}" r="4" fill="{color}"><title>{_html.escape(name)}: '
                f'{r:.0f} tok/s, {p:+.2f}% ppl ({outcome})</title></circle>',
                f'<text x="{px(r) + 6:.1f}" y="{py(p) - 6:.1f}" font-size="11">{_html.escape(name)}</text>']
    return "\n".join(out + ["</svg>"])


def render_generation_html(report: dict[str, Any]) -> str:
    table = _html.escape("\n".join(generation_lines(report)))
    notes = "".join(f"<li>{_html.escape(n)}</li>" for n in report.get("notes", []))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>mobilize generation: "
            f"{_html.escape(str(report.get('model')))}</title></head><body style='font-family:sans-serif'>"
            f"<h1>{_html.escape(str(report.get('model')))}: decoder files</h1>"
            f"<h2>Decode tokens/s vs perplexity change</h2>{chart(report.get('variants', []))}"
            f"<h2>Table</h2><pre>{table}</pre><h2>Notes</h2><ul>{notes}</ul></body></html>")
