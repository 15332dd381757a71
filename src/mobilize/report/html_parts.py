"""What every report.html section is made of: the page's CSS, escaping, number cells and a table.

    >>> table(["variant", "p50 ms"], [["onnx-int8", num(0.512)]], id="results")
    '<table id="results"><tr><th>variant</th><th>p50 ms</th></tr><tr><td>onnx-int8</td><td>0.51</td></tr></table>'
"""

from __future__ import annotations

import html
from typing import Any, Sequence

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}
td:first-child,th:first-child,td.l,th.l{text-align:left}.bad{color:#b00020;font-weight:600}.ok{color:#1b5e20}
svg text{font:11px system-ui,sans-serif}.muted{color:#666}
.wide{overflow-x:auto}.wide td,.wide th{white-space:nowrap}
"""


def esc(value: Any) -> str:
    return html.escape(str(value))


def num(value: Any, suffix: str = "", digits: int = 2) -> str | None:
    """A float with ``digits`` decimals (anything else as it is); None stays None (a ``-`` cell)."""
    if value is None:
        return None
    return f"{value:.{digits}f}{suffix}" if isinstance(value, float) else f"{value}{suffix}"


def cell(value: Any, cls: str = "", title: str = "") -> str:
    """One ``<td>``, escaped; None is ``-``."""
    attrs = (f' class="{cls}"' if cls else "") + (f' title="{esc(title)}"' if title else "")
    return f"<td{attrs}>{'-' if value is None else esc(value)}</td>"


def table(heads: Sequence[str], rows: Sequence[Sequence[Any]], id: str = "", titles: Sequence[str] = (),
          left: Sequence[str] = ()) -> str:
    """A table of plain cells (a row's item that already starts with ``<td`` is kept as it is); ``titles``: each
    heading's tooltip; ``left``: the headings of text columns, aligned left like their cells."""
    titles = list(titles) + [""] * (len(heads) - len(titles))
    head = "".join("<th" + (' class="l"' if h in left else "") + (f' title="{esc(t)}"' if t else "")
                   + f">{esc(h)}</th>" for h, t in zip(heads, titles))
    body = "".join("<tr>" + "".join(c if isinstance(c, str) and c.startswith("<td") else cell(c) for c in row)
                   + "</tr>" for row in rows)
    attr = f' id="{esc(id)}"' if id else ""
    return f"<table{attr}><tr>{head}</tr>{body}</table>"


def outcome_cell(v: dict[str, Any]) -> str:
    """A variant's outcome (with its failed stage, and the arm64 verdict where it differs from this host's)."""
    arm = v.get("arm64") or {}
    differs = f' <b class="bad">(arm64 {esc(arm.get("outcome"))})</b>' if arm.get("differs_from_host") else ""
    stage = f" ({esc(v['stage'])})" if v.get("stage") else ""
    return f'<td class="l {"ok" if v["outcome"] == "OK" else "bad"}">{esc(v["outcome"])}{stage}{differs}</td>'


def rule_cell(v: dict[str, Any]) -> str:
    """The rule that decided the variant's verdict, its reason as the tooltip."""
    verdict = v.get("verdict") or {}
    return cell(verdict.get("rule") or "-", "l", verdict.get("reason") or "")
