"""The terminal table, sorted by latency; failures listed after the measured variants.  Every
verdict names its rule; every speed-up and accuracy drop is marked ``~`` when it is inside its
95% interval of "no difference" (a tie).
"""

from __future__ import annotations

from typing import Any

from mobilize.core.errors import clip

ORDER = {"OK": 0, "VACUOUS": 1, "OVER_BUDGET": 2, "MISMATCH": 3}


def _fmt(value: Any, spec: str, empty: str = "-") -> str:
    return empty if value is None else format(value, spec)


def speed_text(v: dict[str, Any]) -> str:
    s = v.get("speedup")
    if not s or s.get("ratio") is None:
        return "-"
    return f"{s['ratio']:.2f}x" + ("" if s.get("significant") else "~")


def drop_text(acc: dict[str, Any]) -> str:
    """The drop in the task's measure (top-1 points for a classifier), ``~`` when inside its 95% interval."""
    tm = acc.get("task_measure")
    if tm and tm.get("rule") != "cosine":
        if tm.get("drop") is None:
            return "-"
        return f"{tm['drop']:+.1f}" + ("~" if tm.get("drop_significant") is False else "")
    if acc.get("top1_drop") is None:
        return "-"
    return f"{acc['top1_drop']:+.1f}" + ("" if acc.get("top1_drop_significant") else "~")


ONE_VALUE_COLUMN = "err %"
"""The measure column of a model with one value per sample (a speech probability): its largest error over the float
model's largest value, in percent (its cosine is only its sign, 1.0000 for anything of the same sign)."""


def measure_column(report: dict[str, Any]) -> str:
    """The table heading of the task's measure: ``top-1 %`` only where the model has classes."""
    if any(_one_value(v) is not None for v in report.get("variants") or []):
        return ONE_VALUE_COLUMN
    for v in report.get("variants") or []:
        tm = (v.get("accuracy") or {}).get("task_measure")
        if tm:
            return tm["column"]
    task = (report.get("task") or {}).get("name")
    return "top-1 %" if task in (None, "classification") else "cosine"


def _one_value(v: dict[str, Any]) -> float | None:
    """A one-value verdict's largest relative error (None for any other verdict)."""
    return ((v.get("verdict") or {}).get("numbers") or {}).get("one_value_relative_error")


def measure_text(acc: dict[str, Any], digits: int = 1, variant: dict[str, Any] | None = None) -> str | None:
    """One variant's figure in the task's measure (top-1 %, neighbour recall %, mask IoU %, the user's metric; a
    one-value output's error in percent, given the ``variant`` its verdict is in)."""
    err = _one_value(variant or {})
    if err is not None:
        return f"{100 * err:.{digits + 1}f}"
    tm = acc.get("task_measure")
    if tm:
        value = tm.get("value")
        return None if value is None else f"{value:.{digits if tm.get('percent') else 4}f}"
    if acc.get("task") not in (None, "classification"):
        return None if acc.get("cosine") is None else cosine_text(acc, 4, zero="all zero")
    return None if acc.get("top1") is None else f"{acc['top1']:.{digits}f}"


def both_zero(acc: dict[str, Any]) -> bool:
    """The float model's first output and the file's are all zero (their cosine, 1 by convention, says nothing)."""
    first = acc.get("first_output") or {}
    return first.get("peak") == 0 and first.get("max_abs") == 0


def cosine_text(acc: dict[str, Any], digits: int, zero: str = "both all zero") -> str | None:
    """The mean cosine to the float model, or ``zero`` where both outputs are all zero."""
    if acc.get("cosine") is None:
        return None
    return zero if both_zero(acc) else f"{acc['cosine']:.{digits}f}"


def sqnr_text(acc: dict[str, Any]) -> str:
    if acc.get("sqnr_exact"):
        return "exact"
    if acc.get("finite") is False:
        return "nan"
    return _fmt(acc.get("sqnr_db"), ".1f")


def fidelity_text(v: dict[str, Any]) -> str:
    """The file vs the module it was exported from: ``exact``, its SQNR, or the outcome when it failed."""
    part = (v.get("verdict") or {}).get("fidelity")
    if not part:
        return "-"
    if part["outcome"] != "OK":
        return part["outcome"]
    sqnr = part["numbers"].get("sqnr_db")
    return "exact" if sqnr is None else f"{sqnr:.0f}dB"


def task_name(report: dict[str, Any]) -> str | None:
    """The report's task (``classification``, ``detection``, ``generation`` ...; None in an old report)."""
    task = report.get("task")
    return task.get("name") if isinstance(task, dict) else task


def format_table(report: dict[str, Any], note_width: int = 56) -> str:
    """The results table with its legend: the task's columns (a decoder's in tokens: :mod:`token_table`)."""
    if task_name(report) == "generation":
        from mobilize.report.token_table import format_token_table

        return format_token_table(report, note_width)
    variants = report["variants"]
    frames = bool(report.get("frames"))
    key = (lambda v: (v.get("frames") or {}).get("latency_ms_p50")) if frames else (lambda v: v.get("latency_ms_p50"))
    measured = sorted((v for v in variants if key(v)), key=key)
    rest = [v for v in variants if not key(v)]
    column = measure_column(report)
    speed = any(v.get("speedup") for v in variants)  # none: every file on device only (NNAPI), or none timed
    header = (f"{'variant':<20} {'outcome':<11} {'format':<12} {'runtime':<12} {'interface':<16} {'p50 ms':>8} "
              f"{'p50 file':>8} {'p90 ms':>8} " + (f"{'speedup':>8} " if speed else "")
              + (f"{'frame ms':>8} {'frame x':>8} " if frames else "")
              + f"{'size MB':>8} {'fidelity':>8} {column:>8} {'drop':>6} {'sqnr dB':>8}  {'rule':<20} notes")
    lines = [header, "-" * len(header)]
    for v in measured + rest:
        acc = v.get("accuracy") or {}
        size = v["size_bytes"] / 1e6 if v.get("size_bytes") else None
        p50 = "device" if v.get("on_device_only") else _fmt(v.get("latency_ms_p50"), "8.2f")
        note = _headline(v)
        note = clip(note, note_width)  # whole words: the full note is in report.json
        rule = (v.get("verdict") or {}).get("rule") or "-"
        outcome = v["outcome"] + ("!" if (v.get("arm64") or {}).get("differs_from_host") else "")
        f = v.get("frames") or {}
        lines.append(
            f"{v['name']:<20} {outcome:<11} {(v.get('format') or '-'):<12} {(v.get('runtime') or '-'):<12} "
            f"{interface_text(v):<16} {p50:>8} {file_text(v):>8} {_fmt(v.get('latency_ms_p90'), '8.2f'):>8} "
            + (f"{speed_text(v):>8} " if speed else "")
            + (f"{_fmt(f.get('latency_ms_p50'), '8.2f'):>8} {speed_text(f):>8} " if frames else "")
            + f"{_fmt(size, '8.2f'):>8} "
            f"{fidelity_text(v):>8} "
            f"{measure_text(acc, variant=v) or '-':>8} {drop_text(acc):>6} {sqnr_text(acc):>8}  {rule:<20} {note}")
    lines.append("")
    if speed or frames:
        lines.append("~ : inside the 95% interval of no difference (a tie, not a win or a loss); "
                     f"speed-up vs {report.get('reference_variant')}; rules: see report.json verdicts")
    else:
        lines.append(no_speedup_line(report))
    lines.append(f"fidelity: the file vs the model it was exported from (- : no file); {column.removesuffix(' %')}, "
                 f"drop, sqnr and rule: quality vs the float model on the data")
    lines.append(unit_legend(report))
    disagree = speed_vs_p50_line(report)
    if disagree:
        lines.append(disagree)
    if frames:
        lines += frame_lines(report)
    if any(v.get("arm64") for v in variants):
        lines.append("! : its arm64 verdict (QEMU) differs from this host's: see the arm64 lines and report.json")
    return "\n".join(lines)


SPEED_P50_DISAGREE = 1.15
"""A speed-up and a p50 ratio further apart than this (either way) are said to disagree, and why."""


def speed_vs_p50_line(report: dict[str, Any]) -> str:
    """When a file's speed-up and the ratio of the p50 column disagree (a load that moved between rounds, or rounds
    only some files ran while racing): one line saying both are shown, how each is made and which the verdicts use.

        >>> r = {"reference_variant": "a", "variants": [{"name": "a", "latency_ms_p50": 1.0},
        ...      {"name": "b", "latency_ms_p50": 1.72, "speedup": {"ratio": 0.87}}]}
        >>> speed_vs_p50_line(r)[:80]
        'speed-up and p50 disagree for b (p50 ratio 0.58x, speed-up 0.87x): the speed-up '
    """
    import math

    ref = next((v for v in report["variants"] if v["name"] == report.get("reference_variant")), None)
    if ref is None or not ref.get("latency_ms_p50"):
        return ""
    apart = []
    for v in report["variants"]:
        ratio, p50 = (v.get("speedup") or {}).get("ratio"), v.get("latency_ms_p50")
        if ratio and p50 and v is not ref:
            by_p50 = ref["latency_ms_p50"] / p50
            if abs(math.log(by_p50 / ratio)) > math.log(SPEED_P50_DISAGREE):
                apart.append(f"{v['name']} (p50 ratio {by_p50:.2f}x, speed-up {ratio:.2f}x)")
    if not apart:
        return ""
    return (f"speed-up and p50 disagree for {', '.join(apart[:3])}{' ...' if len(apart) > 3 else ''}: the speed-up "
            f"compares each file with {ref['name']} round by round (the geometric mean of the per-round ratios, in "
            f"the rounds both ran), p50 pools all of a file's calls; a machine whose speed moved between rounds, or "
            f"rounds only the raced files ran, moves p50, not the paired ratio, which the intervals and ties use")


def no_speedup_line(report: dict[str, Any]) -> str:
    """Why the table has no speed-up column (one line): speed-ups are against the reference variant, which was not
    timed on this host (an on-device runtime such as NNAPI), or fewer than two files were timed."""
    variants = report["variants"]
    ref = next((v for v in variants if v["name"] == report.get("reference_variant")), None)
    if ref is not None and ref.get("on_device_only"):
        return (f"no speed-ups: they are against {ref['name']}, the plan's reference, whose runtime runs only on the "
                f"device ({ref.get('runtime')} checks its numbers on this host, not its speed); rules: see report.json "
                f"verdicts")
    timed = [v["name"] for v in variants if v.get("latency_ms_round_medians")]
    why = (f"only {timed[0]} was timed, with no other file to compare it with" if len(timed) == 1
           else "no file was timed on this host" if not timed else
           f"the reference, {report.get('reference_variant')}, has no time")
    return f"no speed-ups: {why}; rules: see report.json verdicts"


def frame_lines(report: dict[str, Any]) -> list[str]:
    """Under the table with ``--frames``: what the frame column times, then each file's stages and its infer check
    (the infer stage inside the loop against the file alone, with the rule that decided it)."""
    fr = report["frames"]
    lines = [f"frame ms: {fr['label']} ({fr.get('resize', 'nearest')} resize; frames from "
             f"{fr.get('source') or 'a synthetic moving pattern'}): camera frame -> the file's input -> inference -> "
             f"top-5, conversion included; frame x: its speed-up; the pick is made on it",
             f"  {'variant':<20} {'convert':>8} {'feed':>8} {'infer':>8} {'answer':>8}  infer in the loop vs the file "
             f"alone (ms p50; the ratio paired round by round)"]
    for v in report["variants"]:
        f = v.get("frames")
        if not f:
            continue
        st = {k: _fmt((f.get("stages") or {}).get(k, {}).get("latency_ms_p50"), "8.3f")
              for k in ("convert", "feed", "infer", "answer")}
        check = f.get("infer_check") or {}
        if check.get("ratio") is None:
            verdict = check.get("reason", "-")
        else:
            verdict = (f"{check['infer_ms_p50']:.3f} vs {check['alone_ms_p50']:.3f}: {check['ratio']:.2f}x (95% CI "
                       f"{check['ratio_low']:.2f}-{check['ratio_high']:.2f}) [{check['rule']}]"
                       + ("" if check.get("within") else f": {_cause(check)}"))
        lines.append(f"  {v['name']:<20} {st['convert']:>8} {st['feed']:>8} {st['infer']:>8} {st['answer']:>8}  "
                     f"{verdict}")
    return lines


def _cause(check: dict[str, Any]) -> str:
    if check.get("within") is None:
        return "the interval holds both within 15% and over; more --rounds narrow it"
    if check["rule"] == "frame-infer-pause":
        return (f"over 15%; the file alone with the frame's convert between runs is {check['control_ratio']:.2f}x too: "
                f"the pause between frames (the runtime's threads idle), not the frame path's input")
    return "over 15%; not the pause between frames: the input the frame path hands the runtime costs it"


def interface_text(v: dict[str, Any]) -> str:
    """The file's element types and layout, inputs -> outputs (``int8 NHWC->int8``); ``*`` when it converts from
    and to the reference's float tensors."""
    face = v.get("interface")
    if not face:
        return "-"
    return face["text"] + ("*" if face.get("conversion") not in (None, "none") else "")


def file_text(v: dict[str, Any]) -> str:
    """The file-alone p50: ``=`` where it is the same call as the p50 (a file that converts nothing)."""
    if v.get("latency_ms_p50_file") is None:
        return "-"
    return "=" if v.get("latency_file_same_call") else f"{v['latency_ms_p50_file']:.2f}"


UNIT_WORDS = {"same-work": "the same work for every file: from the reference's float input to a float answer, each "
                           "file's own conversions (* in interface: quantize, NCHW->NHWC, dequantize) timed with it",
              "file": "each file alone, on inputs already converted to its own element type and layout"}


def unit_legend(report: dict[str, Any]) -> str:
    unit = report.get("unit") or "file"
    rows = report.get("call_rows")
    per_call = (f"; every time is per call of the model's fixed batch of {rows} rows (a row: the time / {rows}), "
                f"while accuracy is judged per row") if rows else ""
    return (f"p50/p90 ms: {UNIT_WORDS.get(unit, unit)}; p50 file: the file alone, its conversions done once outside "
            f"the timed call (= : the same call, nothing to convert){per_call}")


def _headline(v: dict[str, Any]) -> str:
    """The one note that matters most for the table: a failure, a warning, else the first note."""
    notes = v.get("notes") or []
    for key in ("MISMATCH", "OVER_BUDGET", "VACUOUS", "FAIL", "UNSUPPORTED", "TIMEOUT", "INTERRUPTED", "WARNING"):
        for n in notes:
            if key in n:
                return n
    return notes[0] if notes else ""


def warning_lines(report: dict[str, Any]) -> list[str]:
    """Every variant's WARNING note in full: the table's notes column shows one note, cut to the width."""
    out = []
    for v in report["variants"]:
        for note in v.get("notes") or []:
            if "WARNING" in note:
                out.append(f"{v['name']}: {note}")
    return out


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The recommendation (or why there is none), with the noise it was judged against."""
    rec = report.get("recommended")
    variants = {v["name"]: v for v in report["variants"]}
    lines = [report["reference_warning"]] if report.get("reference_warning") else []
    failed = report.get("reference_failure")
    if failed:
        lines.append(f"the float reference failed ({failed['outcome']} in stage '{failed['stage']}'): no variant was "
                     f"judged" + (f"; {failed['hint']}" if failed.get("hint") else ""))
    if not rec:
        counts: dict[str, int] = {}
        for v in report["variants"]:
            counts[v["outcome"]] = counts.get(v["outcome"], 0) + 1
        budgets = report.get("budgets") or {}
        if budgets.get("none_met") and budgets.get("missed"):
            lines.append(f"no pick: none of the {len(budgets['missed'])} OK file(s) is within the budgets (each "
                         f"file's note says which it missed)")
        else:
            lines.append("no variant is OK and timed: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    else:
        at, speed, drop = pick_figures(report, variants[rec["name"]])
        head = "recommended" if not rec.get("tied") else "recommended (tie)"
        lines.append(f"{head}: {rec['name']} at {at}{speed}{drop}")
        lines.append(f"  why: {rec['reason']}")  # whole: a tie's reason holds colons and semicolons
        if rec.get("inputs"):
            lines.append(f"  inputs: {rec['inputs']['text']}")
        if rec.get("unchecked"):
            lines.append(f"  not checked: {rec['unchecked']}")
    if isinstance(report.get("task"), dict):  # (a report before tasks were typed holds the bare name)
        lines.append(report["task"]["text"])
    lines += chosen_lines(report)
    lines += warning_lines(report)
    lines += mixed_precision_route(report)
    if report.get("racing"):
        from mobilize.bench.racing import RaceRecord

        race_line = RaceRecord.summary_of(report["racing"])
        if (rec or {}).get("rule") == "race-busy-machine" and report["racing"].get("stopped") == "separated":
            race_line += (" by the race's test, which the busy machine overrules: not claimed "
                          "[rule race-busy-machine]")
        lines.append(race_line)
    spreads = [v.get("round_spread_percent") for v in report["variants"] if v.get("round_spread_percent") is not None]
    if spreads:
        lines.append(f"noise: round medians spread {min(spreads):.0f}-{max(spreads):.0f}% across variants "
                     f"({report.get('rounds')} interleaved rounds for every variant, more for those raced)")
    if report.get("stage_seconds"):
        lines.append(stage_line(report["stage_seconds"]))
    cpu = report.get("host_cpu") or {}
    lines.append(f"machine: {cpu.get('model', '?')}, {report.get('threads')} thread(s)" + _memory(report))
    load = report.get("machine_load") or {}
    if load.get("busy"):
        from mobilize.bench.load import MachineLoad

        fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in load.items()
                  if k in MachineLoad.__dataclass_fields__}
        lines.append(f"WARNING: the machine was busy during the timed rounds ({MachineLoad(**fields).text()}): "
                     f"the ratios and the pick may reflect the load, not the files")
    return lines


def mixed_precision_route(report: dict[str, Any]) -> list[str]:
    """Where int8 files missed the accuracy budget, the route to one within it (issue #67): ``mobilize tune``
    localises the drift and keeps the layers that cost the budget in float, one more at a time, and times the
    result (:mod:`mobilize.tune.exclude`), as the command to run.  None for a decoder (its ladder is tune's too,
    by perplexity) or when no int8 file missed.

    >>> report = {"model": "enc.py:Encoder", "data": "sentences.npz", "task": {"name": "embedding"},
    ...           "policy": {"min_cosine": 0.998}, "input_specs": [{"shape": [1, 64], "dtype": "int64"}] * 2,
    ...           "variants": [{"name": "onnx-int8", "kind": "quantized", "outcome": "OVER_BUDGET"}]}
    >>> print(mixed_precision_route(report)[0])
    route: onnx-int8 missed the accuracy budget; `mobilize tune enc.py:Encoder --data sentences.npz --min-cosine 0.998 --input_dims '1,64;1,64' --input_type 'int64;int64'` keeps the layers that cost it in float (found by localising the drift) and times the mixed file
    """
    import shlex

    missed = [v["name"] for v in report.get("variants") or []
              if v.get("kind") == "quantized" and v.get("outcome") == "OVER_BUDGET"]
    if not missed or task_name(report) == "generation" or not report.get("model"):
        return []
    policy = report.get("policy") or {}
    cosine = task_name(report) in ("raw", "embedding", None)
    budget = (f"--min-cosine {policy.get('min_cosine')}" if cosine else f"--max-drop {policy.get('max_drop_points')}")
    args = [shlex.quote(str(report["model"])), "--data", shlex.quote(str(report["data"])) if report.get("data")
            else "<samples>", *budget.split()]
    specs = report.get("input_specs") or []
    if specs and not str(report["model"]).startswith("zoo:"):
        args += ["--input_dims", shlex.quote(";".join(",".join(map(str, s["shape"])) for s in specs)),
                 "--input_type", shlex.quote(";".join(s.get("dtype", "float32") for s in specs))]
    return [f"route: {', '.join(missed)} missed the accuracy budget; `mobilize tune {' '.join(args)}` keeps the "
            f"layers that cost it in float (found by localising the drift) and times the mixed file"]


def pick_figures(report: dict[str, Any], best: dict[str, Any]) -> tuple[str, str, str]:
    """The recommended variant's time, its speed-up and its drop in the task's measure, for the
    ``recommended:`` line (a decoder's per token and its perplexity change: :mod:`token_table`)."""
    if task_name(report) == "generation":
        from mobilize.report.token_table import pick_figures as token_figures

        return token_figures(report, best)
    acc = best.get("accuracy") or {}
    tm = acc.get("task_measure")
    if tm and tm.get("drop") is not None and tm.get("rule") != "cosine":
        drop = f", {tm['measure']} drop {drop_text(acc)}{' points' if tm.get('percent') else ''}"
    else:
        drop = f", top-1 drop {drop_text(acc)} points" if acc.get("top1_drop") is not None else ""
    if report.get("frames") and best.get("frames"):
        f = best["frames"]
        speed = f", {speed_text(f)} vs {report.get('reference_variant')}" if f.get("speedup") else ""
        at = f"{f['latency_ms_p50']:.2f} ms p50 {report['frames']['label']} ({best['latency_ms_p50']:.2f} ms plain)"
    else:
        speed = f", {speed_text(best)} vs {report.get('reference_variant')}" if best.get("speedup") else ""
        at = f"{best['latency_ms_p50']:.2f} ms p50"
    return at, speed, drop


def _memory(report: dict[str, Any]) -> str:
    """The timing workers' memory (:mod:`mobilize.compare.memory`): the sum of their own peaks, and how many."""
    mem = report.get("timing_memory")
    if not mem:
        total = report.get("peak_memory_mb_total")
        return f"; timed-round workers peak {total:.0f} MB in total" if total else ""
    hosted = max((len(p["variants"]) for p in mem["processes"]), default=0)
    return (f"; timing workers peak {mem['peak_mb']:.0f} MB in total (the sum of the {len(mem['processes'])} "
            f"processes' own peaks{f', one hosting {hosted} torch-timed variants' if hosted > 1 else ''}; "
            f"{mem['sampled_max_mb']:.0f} MB resident after the fullest round)")


def chosen_lines(report: dict[str, Any]) -> list[str]:
    """Where mobilize departed from a stock default because of the CPU (notes marked ``mobilize chose:``), once
    each, with the variants they apply to."""
    from mobilize.core.target import CHOSE

    seen: dict[str, list[str]] = {}
    for v in report["variants"]:
        for n in v.get("notes") or []:
            if CHOSE in n:
                seen.setdefault(CHOSE + n.split(CHOSE, 1)[1], []).append(v["name"])
    return [f"{text} [{', '.join(names)}]" for text, names in seen.items()]


def stage_line(seconds: dict[str, Any]) -> str:
    """One terminal line: the stages' wall seconds, slowest export and check named."""
    def part(label: str, by_name: dict[str, float], extra: str = "") -> str:
        if not by_name:
            return ""
        slow = max(by_name, key=by_name.get)
        return f"{label} {sum(by_name.values()):.0f} s{extra} (slowest {slow} {by_name[slow]:.0f} s)"

    walls = seconds.get("wall") or {}
    if "variants" in walls and seconds.get("total") is not None:
        return _phase_line(seconds, walls)
    pieces = [f"reference {seconds['reference']:.0f} s", f"lint {seconds['lint']:.0f} s beside the variants" if seconds.get("lint") else "",
              part("exports", seconds.get("export") or {}, " beside the checks"),
              part("load+accuracy", seconds.get("load_accuracy") or {}),
              part("profile", seconds.get("profile") or {}),
              part("timers' start (lean workers, host loads)", seconds.get("timer_start") or {}),
              f"timed rounds {seconds['timed_rounds']:.0f} s" if seconds.get("timed_rounds") is not None else ""]
    total = seconds.get("total")
    tail = f"; {int(total // 60)} min {total % 60:.0f} s in all" if total is not None else ""
    return "time: " + ", ".join(p for p in pieces if p) + tail


def _phase_line(seconds: dict[str, Any], walls: dict[str, float]) -> str:
    """The phases' wall seconds, which add up to the total; inside the variants' phase, each stage's seconds summed
    over the variants (they overlap: exports run beside the checks, several workers at a time)."""
    def part(label: str, by_name: dict[str, float], extra: str = "") -> str:
        if not by_name:
            return ""
        slow = max(by_name, key=by_name.get)
        return f"{label} {sum(by_name.values()):.0f} s{extra}, slowest {slow} {by_name[slow]:.0f} s"

    inside = [part("exports", seconds.get("export") or {}, " beside the checks"),
              part("load+accuracy", seconds.get("load_accuracy") or {}), part("profile", seconds.get("profile") or {}),
              part("timers' start", seconds.get("timer_start") or {}),
              f"lint {seconds['lint']:.0f} s" if seconds.get("lint") else ""]
    inside_text = "; ".join(p for p in inside if p)
    pieces = [f"reference {walls.get('reference', seconds['reference']):.0f} s",
              f"variants {walls['variants']:.0f} s" + (f" ({inside_text})" if inside_text else ""),
              f"timed rounds {walls['timed_rounds']:.0f} s" if walls.get("timed_rounds") is not None else "",
              f"arm64 checks {walls['arm64']:.0f} s" if walls.get("arm64") is not None else "",
              f"on the devices {walls['devices']:.0f} s" if walls.get("devices") is not None else "",
              f"the rest {walls.get('rest', 0.0):.0f} s (start-up, finishing, the report)"]
    total = seconds["total"]
    return (f"time: {'; '.join(p for p in pieces if p)}; {int(total // 60)} min {total % 60:.0f} s in all (the "
            f"phases add up to it; in brackets, each stage's seconds summed over the variants, which overlap)")


def summary_line(report: dict[str, Any]) -> str:
    return summary_lines(report)[0]
