"""``compare --baseline OLD/report.json`` (#65 item 2): this run's files against an earlier run's (the same model,
or another checkpoint's, on the same CPU and plan): per file, how many times as slow it is now with its interval,
its verdict then and now, and a flag where a file the baseline had OK is now slower beyond noise or no longer OK.
A flagged file makes compare exit with the budgets' status (:data:`mobilize.compare.budgets.GATE_EXIT`).

The two runs' rounds are not paired (they ran at different times), so a file's ratio is the geometric mean of its
round medians now over then with Welch's t interval on their logarithms.  The machine's own speed may have moved
between the runs: with three or more files timed in both, each file is read against the change most files share
(the median ratio, said), so a machine 20% slower today flags nothing and a file that alone got slower is flagged.
A file is *slower* when its interval (at 95%) lies above 1 and its ratio is at least :data:`SLOWER_FACTOR`:
round-to-round noise inside one run is narrower than the run-to-run drift of a file on a shared VM (seen: 5-8%),
so a practical floor keeps a rerun from flagging itself; the rule says both.

    >>> old = {"variants": [{"name": "a", "outcome": "OK", "latency_ms_round_medians": [1.0, 1.02, 0.98, 1.01]},
    ...                     {"name": "b", "outcome": "OK", "latency_ms_round_medians": [2.0, 2.02, 1.98, 2.01]}]}
    >>> new = [{"name": "a", "outcome": "OK", "latency_ms_round_medians": [1.01, 0.99, 1.0, 1.02]},
    ...        {"name": "b", "outcome": "OK", "latency_ms_round_medians": [3.0, 3.1, 2.9, 3.05]}]
    >>> out = compare_with(old, new, "old/report.json")
    >>> out["regressions"], out["files"]["b"]["rule"], out["files"]["a"]["rule"]
    (['b'], 'baseline-slower', 'baseline-same')
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Sequence

from mobilize.core.errors import ConfigError

SLOWER_FACTOR = 1.10
"""A file is flagged slower than its baseline only at this ratio or more (and beyond noise)."""


def load_baseline(path: str, cpu_now: dict[str, Any]) -> dict[str, Any]:
    """The earlier run's report.json (JSON only, nothing unpickled), checked before any work: a compare report with
    timed variants, from this CPU (the model, architecture and instruction sets mobilize reads), else one line."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--baseline {path}: no such file", hint="give an earlier compare's report.json")
    try:
        old = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--baseline {path} is not a compare report.json: {exc}") from None
    if not isinstance(old, dict) or not isinstance(old.get("variants"), list) or "host_cpu" not in old:
        raise ConfigError(f"--baseline {path} is not a compare report.json (no variants or host_cpu)")
    then = old.get("host_cpu") or {}
    same = all(then.get(k) == cpu_now.get(k) for k in ("model", "arch")) and \
        sorted(then.get("flags") or []) == sorted(cpu_now.get("flags") or [])
    if not same:
        raise ConfigError(f"--baseline {path} was measured on another CPU ({_cpu(then)}; this one: {_cpu(cpu_now)}): "
                          f"times from two CPUs do not compare",
                          hint="compare against a run made on this machine kind, or run both here")
    return {**old, "_path": str(path)}


def check_plan(old: dict[str, Any], plan_name: str) -> None:
    """A baseline of another plan is refused (its variants are other files under the same names)."""
    if old.get("plan") and old["plan"] != plan_name:
        raise ConfigError(f"--baseline {old.get('_path')} ran plan '{old['plan']}', this run plan '{plan_name}'",
                          hint="give the same --plan as the baseline's run")


def _cpu(cpu: dict[str, Any]) -> str:
    return f"{cpu.get('model', '?')}, {cpu.get('arch', '?')}, {len(cpu.get('flags') or [])} listed flags"


def compare_with(old: dict[str, Any], new: Sequence[dict[str, Any]], path: str | None = None,
                 level: float = 0.95, load_now: dict[str, Any] | None = None) -> dict[str, Any]:
    """report.json's ``baseline``: per file in both runs, the speed ratio (now / then) with its interval against
    the common change, the outcomes then and now, and the rule that decided its flag; ``regressions``: the flagged.
    ``load_now``: this run's machine load (:meth:`mobilize.bench.load.MachineLoad.to_json`).  Where this run's or
    the baseline's machine was busy, a file is claimed slower only when its interval lies above the speed change the
    busy run measured (``speed_shift``: a 20 ms stall per call still is; a 1.4x drift of a machine that moved
    1.7x is not: rule baseline-busy-machine)."""
    busy = {w: max(float(load.get("speed_shift") or 1.0), 1.0)
            for w, load in (("this run's", load_now or {}), ("the baseline's", old.get("machine_load") or {}))
            if load.get("busy")}
    explained = max(busy.values(), default=1.0)
    before = {v["name"]: v for v in old.get("variants") or []}
    timed = {v["name"]: (_logs(before[v["name"]]), _logs(v)) for v in new
             if v["name"] in before and len(_logs(before[v["name"]])) >= 2 and len(_logs(v)) >= 2}
    centres = {n: statistics.fmean(b) - statistics.fmean(a) for n, (a, b) in timed.items()}
    common = statistics.median(centres.values()) if len(centres) >= 3 else 0.0
    files: dict[str, Any] = {}
    for v in new:
        then = before.get(v["name"])
        if then is None:
            continue
        row: dict[str, Any] = {"outcome_then": then.get("outcome"), "outcome_now": v.get("outcome"),
                               "p50_ms_then": _p50(then), "p50_ms_now": _p50(v),
                               "quality_then": _quality(then), "quality_now": _quality(v)}
        if v["name"] in timed:
            a, b = timed[v["name"]]
            low, high = _welch(a, b, level)
            row.update(ratio=math.exp(centres[v["name"]] - common), low=math.exp(low - common),
                       high=math.exp(high - common), raw_ratio=math.exp(centres[v["name"]]))
        row["rule"], row["reason"] = _rule(row)
        if busy and row["rule"] == "baseline-slower" and row["low"] <= explained:
            row["rule"] = "baseline-busy-machine"
            row["reason"] = (row["reason"].replace(" [rule baseline-slower]", "") + f", but {' and '.join(busy)} "
                             f"machine was busy (its speed moved {explained:.2f}x during the rounds, which the "
                             f"interval does not clear): not claimed; rerun both on a quiet machine [rule "
                             f"baseline-busy-machine]")
        files[v["name"]] = row
    gone = [n for n, v in before.items() if v.get("outcome") == "OK" and n not in files]
    return {"path": path or old.get("_path"), "created": old.get("created"), "model": old.get("model"),
            "common_change": math.exp(common), "common_rule": (
                f"each file read against the change most files share ({math.exp(common):.2f}x, the median of "
                f"{len(centres)} files' ratios)" if len(centres) >= 3 else
                "fewer than 3 files timed in both runs: ratios as measured, the machine's own drift not taken out"),
            "slower_factor": SLOWER_FACTOR, "files": files, "not_in_this_run": gone, "busy_machine": busy or None,
            "regressions": [n for n, r in files.items() if r["rule"] in ("baseline-slower", "baseline-no-longer-ok")]}


def _rule(row: dict[str, Any]) -> tuple[str, str]:
    then, now = row["outcome_then"], row["outcome_now"]
    if then == "OK" and now != "OK":
        return "baseline-no-longer-ok", f"OK in the baseline, {now} now [rule baseline-no-longer-ok]"
    if "ratio" not in row:
        return "baseline-untimed", "not timed in both runs [rule baseline-untimed]"
    q_then, q_now = row["quality_then"] or {}, row["quality_now"] or {}
    quality = (f"; {q_now['measure']} {_num(q_then.get('value'))} then, {_num(q_now.get('value'))} now"
               if q_now.get("measure") and q_now.get("measure") == q_then.get("measure") else "")
    ci = f"{row['ratio']:.2f}x as slow as then (95% CI {row['low']:.2f}-{row['high']:.2f}){quality}"
    if then == "OK" and row["low"] > 1.0 and row["ratio"] >= SLOWER_FACTOR:
        return "baseline-slower", (f"{ci}: slower beyond noise and by {SLOWER_FACTOR:.2f}x or more "
                                   f"[rule baseline-slower]")
    if row["high"] < 1.0 and row["ratio"] <= 1 / SLOWER_FACTOR:
        return "baseline-faster", f"{ci}: faster beyond noise [rule baseline-faster]"
    return "baseline-same", f"{ci}: within noise or under {SLOWER_FACTOR:.2f}x of it [rule baseline-same]"


def _quality(v: dict[str, Any]) -> dict[str, Any] | None:
    """A file's quality against its own run's float model: the task's measure where there is one, else the mean
    cosine, with the SQNR."""
    acc = v.get("accuracy") or {}
    tm = acc.get("task_measure") or {}
    if not acc:
        return None
    measure = {"measure": tm["measure"], "value": tm.get("value")} if tm.get("measure") else \
        {"measure": "mean cosine", "value": acc.get("cosine")}
    return {**measure, "sqnr_db": acc.get("sqnr_db")}


def _logs(v: dict[str, Any]) -> list[float]:
    return [math.log(m) for m in v.get("latency_ms_round_medians") or [] if m and m > 0]


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.4f}" if abs(x) <= 1 else f"{x:.2f}"


def _p50(v: dict[str, Any]) -> float | None:
    return (v.get("latency") or {}).get("latency_ms_p50") or v.get("latency_ms_p50")


def _welch(a: Sequence[float], b: Sequence[float], level: float) -> tuple[float, float]:
    """Welch's t interval of mean(b) - mean(a) (log round medians of two runs)."""
    from mobilize.accuracy.stats import t_quantile

    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(b) - statistics.fmean(a)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff
    df = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0))
    half = t_quantile(df, level) * se
    return diff - half, diff + half


def lines(baseline: dict[str, Any]) -> list[str]:
    """The terminal's baseline section."""
    out = [f"baseline: {baseline['path']} ({baseline.get('created') or 'date unknown'}); {baseline['common_rule']}"]
    for name, row in baseline["files"].items():
        mark = "  <-- REGRESSION" if name in baseline["regressions"] else ""
        out.append(f"  {name}: {row['reason']}{mark}")
    if baseline["not_in_this_run"]:
        out.append(f"  not in this run (OK in the baseline): {', '.join(baseline['not_in_this_run'])}")
    if baseline["regressions"]:
        out.append(f"baseline: {len(baseline['regressions'])} file(s) regressed against the baseline: "
                   f"{', '.join(baseline['regressions'])}")
    return out

