"""The sweep's index: a terminal table, ``index.json`` and ``index.html``, one row per model.

Rows are grouped by hardware fingerprint: every speed-up in the index is the model's own
(recommended variant against its plan's reference, timed in the same run on the same machine);
the index never divides latencies of two rows (see ``fingerprint.latency_ratio``).

    >>> from mobilize.sweep.jobs import ModelEntry
    >>> e = ModelEntry("zoo:conv_bn_relu", "conv_bn_relu", {}, "k", outcome_counts={"OK": 3})
    >>> format_table([e]).splitlines()[2].split()[:2]
    ['conv_bn_relu', 'PENDING']
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from mobilize.core.jsonfile import dumps_measured
from mobilize.sweep.fingerprint import fingerprint_id
from mobilize.sweep.jobs import ModelEntry

from mobilize.report.json_report import SCHEMA_VERSION as INDEX_SCHEMA_VERSION  # one version for every JSON


def _speedup_text(entry: ModelEntry) -> str:
    s = entry.speedup
    if not s or s.get("ratio") is None:
        return "-"
    mark = "" if s.get("significant") else "~"
    return f"{s['ratio']:.2f}x{mark}"


def _drop_text(entry: ModelEntry) -> str:
    if entry.top1_drop is not None:
        return f"{entry.top1_drop:+.1f} pt"
    if entry.cosine_mean is not None:
        return f"cos {entry.cosine_mean:.4f}"
    return "-"


def _counts_text(entry: ModelEntry) -> str:
    return " ".join(f"{k}:{v}" for k, v in sorted(entry.outcome_counts.items())) or "-"


def _row(entry: ModelEntry) -> list[str]:
    rec = entry.recommended or {}
    name = (rec.get("name") or "-") + (" (tie)" if rec.get("tied") else "")
    fp = fingerprint_id(entry.fingerprint)[:8] if entry.fingerprint else "-"
    tries = str(entry.attempts) + (" (retried)" if entry.retries else "")
    return [entry.stem, str(entry.status), name, _speedup_text(entry), _drop_text(entry), _counts_text(entry), fp,
            tries, entry.error or ""]


HEADER = ["model", "status", "recommended", "speedup", "acc drop", "outcomes", "machine", "tries", "error"]


def format_table(entries: list[ModelEntry]) -> str:
    rows = [HEADER] + [_row(e) for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER) - 1)]
    lines = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r, widths)] + [r[-1][:80]]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "-" * max(len(ln) for ln in lines))
    return "\n".join(lines)


def index_json(entries: list[ModelEntry], meta: dict[str, Any]) -> dict[str, Any]:
    fingerprints = {fingerprint_id(e.fingerprint): e.fingerprint for e in entries if e.fingerprint}
    counts: dict[str, int] = {}
    for e in entries:
        counts[str(e.status)] = counts.get(str(e.status), 0) + 1
    return {"schema_version": INDEX_SCHEMA_VERSION, **meta, "status_counts": counts,
            "complete": all(e.status.is_result for e in entries), "fingerprints": fingerprints,
            "models": [e.to_json() for e in entries]}


def write_index(entries: list[ModelEntry], meta: dict[str, Any], out: Path) -> None:
    from mobilize.core.artifact import atomic_write_text

    data = index_json(entries, meta)
    atomic_write_text(out / "index.json", dumps_measured(data, indent=2, default=str) + "\n")
    atomic_write_text(out / "index.html", _html(entries, data))


def _html(entries: list[ModelEntry], data: dict[str, Any]) -> str:
    esc = html.escape
    groups: dict[str, list[ModelEntry]] = {}
    for e in entries:
        groups.setdefault(fingerprint_id(e.fingerprint) if e.fingerprint else "not run", []).append(e)
    parts = ["<!doctype html><meta charset='utf-8'><title>mobilize sweep</title>",
             "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}"
             "tr:nth-child(even){background:#f4f4f4}.FAILED,.INTERRUPTED{color:#b00}</style>",
             f"<h1>mobilize sweep: plan {esc(str(data.get('plan')))}</h1>",
             f"<p>data: {esc(data.get('data') or 'per model, as compare chooses')}; executor: {esc(str(data.get('executor')))}; "
             f"models: {esc(json.dumps(data['status_counts']))}</p>",
             "<p>Speed-ups are each model's recommended variant against its plan's reference variant, timed in the "
             "same run on the same machine; rows on different machines are never compared.</p>"]
    for fid, group in groups.items():
        fp = data["fingerprints"].get(fid)
        what = (f"{fp['cpu_model']} ({fp['arch']}, {fp['cores']} cores, {fp['threads']} threads)" if fp else fid)
        parts.append(f"<h2>machine {esc(fid[:8])}: {esc(what)}</h2><table><tr>"
                     + "".join(f"<th>{esc(h)}</th>" for h in HEADER) + "</tr>")
        for e in group:
            cells = _row(e)
            link = (f"<a href='{esc(e.report)}'>{esc(e.stem)}</a>" if e.report else esc(e.stem))
            parts.append(f"<tr class='{esc(str(e.status))}'><td>{link}</td>"
                         + "".join(f"<td>{esc(c)}</td>" for c in cells[1:]) + "</tr>")
            for r in e.retries:
                parts.append(f"<tr><td></td><td colspan='{len(HEADER) - 1}'>retry: {esc(r)}</td></tr>")
        parts.append("</table>")
    return "\n".join(parts) + "\n"


def load_entry(path: Path) -> ModelEntry | None:
    """A model's saved entry (``DIR/<stem>/sweep.json``), or None if there is none or it cannot be read."""
    try:
        return ModelEntry.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def save_entry(entry: ModelEntry, path: Path) -> None:
    from mobilize.core.artifact import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, dumps_measured(entry.to_json(), indent=2, default=str) + "\n")

