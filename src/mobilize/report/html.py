"""report.html: one self-contained file (inline SVG and CSS, no scripts or network) for every task, rendered from
report.json: the pick and its why, the task's charts and results table (a measured task's latency and accuracy,
:mod:`html_charts`; a decoder's tokens/s vs perplexity, :mod:`html_generation`), then for every task the verdicts
with their rules, the optional sections (lint, compression, arm64), sizes, the time split and the notes.

    >>> page = render_html({"model": "zoo:toy", "plan": "default", "threads": 1, "rounds": 3, "iterations": 10,
    ...                     "complete": True, "recommended": None, "variants": []})
    >>> "<h2>Verdicts</h2>" in page and "<pre>" not in page
    True
"""

from __future__ import annotations

import math
from typing import Any

from mobilize.report import html_generation
from mobilize.report.devices import devices_section
from mobilize.report.html_charts import CHAR_W, accuracy_chart, latency_chart, pareto_front, size_chart
from mobilize.report.html_parts import CSS, cell, esc, num, outcome_cell, rule_cell, table
from mobilize.report.terminal import task_name

__all__ = ["CHAR_W", "CSS", "accuracy_chart", "esc", "latency_chart", "pareto_front", "render_html", "size_chart"]


def render_html(report: dict[str, Any]) -> str:
    """The page of any compare report (``generation`` included)."""
    setup, body = TASK_PAGES.get(task_name(report), (measured_setup, measured_body))
    variants = report["variants"]
    status = "" if report.get("complete") else '<p class="bad">Partial report: the run was interrupted or is still going.</p>'
    extra = "".join(section(report) for section in EXTRA_SECTIONS)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mobilize compare: {esc(report['model'])}</title>
<style>{CSS}</style></head><body>
<h1>mobilize compare — {esc(report['model'])}</h1>
<p>{setup(report)}
Generated {esc(report.get('created', ''))} by mobilize {esc(report.get('mobilize_version', ''))}.</p>
{status}{summary_html(report)}
{body(report)}
<h2>Verdicts</h2>{verdict_table(report)}
{extra}
<h2>Sizes</h2>{size_chart(variants)}
{time_section(report)}
<h2>Notes</h2>{notes_table(report)}
</body></html>
"""


def summary_html(report: dict[str, Any]) -> str:
    """The terminal's summary lines (the pick first, in bold; warnings in red)."""
    from mobilize.report.terminal import summary_lines

    out = []
    for i, line in enumerate(summary_lines(report)):
        text = f"<b>{esc(line)}</b>" if i == 0 else esc(line)
        out.append(f'<p class="bad">{text}</p>' if line.startswith("WARNING") else f"<p>{text}</p>")
    return "".join(out)


def measured_setup(report: dict[str, Any]) -> str:
    return (f"Plan <b>{esc(report['plan'])}</b>, data <b>{esc(report.get('data'))}</b> "
            f"({esc(report.get('accuracy_samples', '?'))} samples), {esc(report['threads'])} thread(s), "
            f"{esc(report['rounds'])} interleaved rounds, {esc(report['iterations'])} timed iterations per variant.")


def measured_body(report: dict[str, Any]) -> str:
    """A measured task's charts and results table (classification, embedding, detection, segmentation, raw)."""
    from mobilize.report.terminal import measure_column, unit_legend

    variants = report["variants"]
    column = measure_column(report)
    metric = chart_measure(report)
    measure = "" if column == "cosine" else f"{column.removesuffix(' %')}, drop, "
    return f"""<h2>Latency</h2>{latency_chart(variants)}
<h2>Latency vs accuracy ({esc(CHART_TITLES.get(metric) or column.removesuffix(' %'))})</h2>{accuracy_chart(variants, metric)}
<h2>Results</h2><div class="wide">{results_table(report)}</div>
<p class="muted">~ marks a difference inside its 95% interval of no difference: a tie. Speed-ups are against
{esc(report.get('reference_variant'))}, from paired round medians. Fidelity: the file vs the model it was exported from
(its exporter's promise; - : no file). {esc(measure)}cosine, SQNR, max abs and rule: quality vs
the float model on the data (the budget). {esc(unit_legend(report))}.</p>"""


TASK_PAGES = {"generation": (html_generation.setup, html_generation.body)}
"""Per task: its setup sentence and its charts and results table (every other task: a measured one's)."""


def results_table(report: dict[str, Any]) -> str:
    """A measured task's results, fastest first (with compare --frames' frame-to-answer columns when timed).  A raw
    output's measure is its cosine, which has its own column: no second one."""
    from mobilize.report.terminal import (
        cosine_text, drop_text, fidelity_text, file_text, interface_text, measure_column, measure_text, speed_text,
        sqnr_text,
    )

    frames, column = bool(report.get("frames")), measure_column(report)
    own = column != "cosine"
    heads = ["variant", "outcome", "format", "runtime", "interface", "p50 ms", "p50 file", "p90 ms", "speedup",
             *(["frame ms", "frame x"] if frames else []), "size MB", "fidelity", *([column, "drop"] if own else []),
             "cosine", "SQNR dB", "max abs", "ran in", "rule"]
    titles = {"frame ms": "frame to answer: the camera pipeline, conversion included",
              "fidelity": "the file vs the model it was exported from"}
    rows = []
    for v in sorted(report["variants"], key=lambda v: v.get("latency_ms_p50") or math.inf):
        acc, f = v.get("accuracy") or {}, v.get("frames") or {}
        rows.append([v["name"], outcome_cell(v), v.get("format"), v.get("runtime"), interface_text(v),
                     "on device only" if v.get("on_device_only") else num(v.get("latency_ms_p50")), file_text(v),
                     num(v.get("latency_ms_p90")), speed_text(v),
                     *([num(f.get("latency_ms_p50")), speed_text(f)] if frames else []),
                     num(v["size_bytes"] / 1e6 if v.get("size_bytes") else None), fidelity_text(v),
                     *([measure_text(acc, 2, v), drop_text(acc)] if own else []), cosine_text(acc, 5),
                     sqnr_text(acc), num(acc.get("max_abs"), digits=3), v.get("ran_in") or v.get("kind"),
                     rule_cell(v)])
    return table(heads, rows, id="results", titles=[titles.get(h, "") for h in heads], left=("outcome", "rule"))


def verdict_table(report: dict[str, Any]) -> str:
    """Every variant's verdict: its outcome, the rule that decided it and why (a file never built: its stage and
    the note that says why).  The reference's warning is in the summary above, once."""
    from mobilize.report.terminal import _headline

    rows = []
    for v in report["variants"]:
        verdict = v.get("verdict") or {}
        reason = once(verdict.get("reason") or _headline(v), report) or None
        rows.append([v["name"], outcome_cell(v), cell(verdict.get("rule"), "l"), cell(reason, "l")])
    return (table(["variant", "outcome", "rule", "reason"], rows, id="verdicts", left=("outcome", "rule", "reason"))
            if rows else "<p>None yet.</p>")


def once(text: str, report: dict[str, Any]) -> str:
    """``text`` with the float reference's warning (a VACUOUS variant's reason, and its note) said by pointing to
    the summary, where the page prints it in full once."""
    warning = (report.get("reference_warning") or "").removeprefix("WARNING: ")
    return text.replace(warning, "the float reference's warning above") if warning and text else text


STAGES = (("reference", "float reference"), ("lint", "lint (beside the variants)"),
          ("export", "exports (beside the checks)"), ("load_accuracy", "load + accuracy checks"),
          ("profile", "profile"), ("timer_start", "timers' start (lean workers, host loads)"),
          ("timed_rounds", "timed rounds"), ("total", "total (wall clock)"))
"""report.json's ``stage_seconds`` keys in the order they run, with what the time split calls them."""


def time_section(report: dict[str, Any]) -> str:
    """Where the run's wall time went, per stage (per-variant stages: their sum and the slowest)."""
    seconds = report.get("stage_seconds")
    if not seconds:
        return ""
    rows = []
    for key, label in STAGES:
        value = seconds.get(key)
        if isinstance(value, dict) and value:
            slow = max(value, key=value.get)
            rows.append([label, num(float(sum(value.values())), digits=1), cell(f"{slow} {value[slow]:.1f} s", "l")])
        elif isinstance(value, (int, float)):
            rows.append([label, num(float(value), digits=1), cell(None, "l")])
    walls = seconds.get("wall") or {}
    phases = ""
    if walls:
        names = {"reference": "float reference", "variants": "variants (builds, checks, timers' start, lint)",
                 "timed_rounds": "timed rounds", "rest": "the rest (start-up, finishing, the report)"}
        phases = ("<h3>Phases (wall clock: they add up to the total)</h3>"
                  + table(["phase", "seconds"], [[names.get(k, k), num(float(v), digits=1)] for k, v in walls.items()],
                          id="time-phases"))
    return ("<h2>Time</h2>" + phases + table(["stage", "seconds", "slowest variant"], rows, id="time-split",
                                             left=("slowest variant",))
            + '<p class="muted">Per stage, each variant\'s seconds summed: exports run beside the checks and lint '
              "beside the variants, so these overlap and add up to more than the wall-clock total; the phases above "
              "add up to it.</p>")


def notes_table(report: dict[str, Any]) -> str:
    """The run's notes, then each variant's, one row each."""
    run = list(dict.fromkeys([*(report.get("notes") or []), *((report.get("generation") or {}).get("notes") or [])]))
    rows = [["(run)", cell(n, "l")] for n in run]
    rows += [[v["name"], cell(once(n, report), "l")] for v in report["variants"] for n in v.get("notes") or []]
    return table(["variant", "note"], rows, id="notes", left=("note",)) if rows else "<p>None.</p>"



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
            f"{p.get('macs_before', 0):,} → {p.get('macs_after', 0):,}", num(p.get("sparsity_percent"), "%"),
            num(v.get("latency_ms_p50")), measure_text(acc, 2))) + "</tr>")
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
        sq = lambda verdict: num(((verdict or {}).get("numbers") or {}).get("sqnr_db"), digits=1)  # noqa: E731
        feats = ", ".join(k for k, on in (a.get("cpu_features") or {}).items() if on)
        top1 = agree.get("top1_agreement")
        cells = [a.get("host_outcome"), sq(a.get("host_verdict")), sq(a.get("verdict")),
                 "exact" if agree.get("exact") else num(agree.get("sqnr_db"), digits=1), None if top1 is None else f"{top1:.1%}",
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


def baseline_section(report: dict[str, Any]) -> str:
    """report.html's section for ``--baseline``: the same rows as the terminal's, the regressions marked."""
    baseline = report.get("baseline")
    if not baseline:
        return ""
    rows = []
    for name, row in baseline["files"].items():
        cls = "bad" if name in baseline["regressions"] else "ok"
        ratio = "-" if "ratio" not in row else f"{row['ratio']:.2f} ({row['low']:.2f}-{row['high']:.2f})"
        rows.append(f'<tr><td>{esc(name)}</td><td>{esc(row["outcome_then"])}</td><td>{esc(row["outcome_now"])}</td>'
                    f'<td>{esc(ratio)}</td><td class="l {cls}">{esc(row["reason"])}</td></tr>')
    return (f"<h2>Against the baseline</h2><p class=\"muted\">{esc(baseline['path'])} "
            f"({esc(baseline.get('created') or 'date unknown')}); {esc(baseline['common_rule'])}. A file OK there is "
            f"a regression when it is now slower beyond noise and by {baseline['slower_factor']:.2f}x or more, or no "
            f"longer OK.</p><table><tr><th>variant</th><th>then</th><th>now</th><th>now / then (95% CI)</th>"
            f"<th class=\"l\">rule</th></tr>{''.join(rows)}</table>")


EXTRA_SECTIONS: list = [lint_section, compression_section, arm64_section, devices_section, baseline_section]
"""Renderers ``report -> html`` for optional sections."""
