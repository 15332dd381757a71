"""``mobilize tune`` for a causal LM (``zoo:tiny_lm``, a saved transformers folder, ``--task generation``): each
engine's decoder files, int4 groups climbed coarsest first to the first within ``--max-ppl-increase``, the files
within the budget raced on decode time per token; the winner's file, and the recipe that rebuilds it.

    $ mobilize tune zoo:tiny_lm --max-ppl-increase 1 -o out/tune
    ...
    winner: executorch-8da4w@g64  out/tune/artifacts/executorch-8da4w@g64/model-8da4w-g64.pte  (rebuild: mobilize
    optimize zoo:tiny_lm --recipe executorch-8da4w@g64)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mobilize.core.errors import ConfigError

VISION_ONLY = (("data", "--data"), ("calibration", "--calibration"), ("max_drop", "--max-drop"),
               ("min_cosine", "--min-cosine"), ("prune", "--prune"), ("metric", "--metric"))
"""Options of the tensor-model search that mean nothing for a causal LM: refused, never ignored."""


def run_generation(args: argparse.Namespace) -> int:
    from mobilize.accuracy.verify import DEFAULT_POLICY, Policy
    from mobilize.cli.progress import Progress
    from mobilize.cli.tune import parse_duration_s
    from mobilize.core.artifact import atomic_write_text
    from mobilize.core.backend import entries
    from mobilize.core.checks import check_positive
    from mobilize.core.jsonfile import dumps_measured
    from mobilize.compare.config import CompareConfig
    from mobilize.tune.decoder import tune_generation
    from mobilize.report.html import render_html
    from mobilize.sources.reference import ModelRef

    for dest, flag in VISION_ONLY:
        if getattr(args, dest, None) is not None:
            raise ConfigError(f"{flag} is not an option for a causal LM's tune (judged on its held-out text by "
                              f"perplexity)", hint="leave it out; the budget is --max-ppl-increase PERCENT")
    budget = DEFAULT_POLICY.max_ppl_increase_percent if args.max_ppl_increase is None else args.max_ppl_increase
    check_positive(budget, "--max-ppl-increase", " percent")
    search_s = parse_duration_s(args.time_budget)
    if search_s is not None:
        check_positive(search_s, "--time-budget", " seconds")
    known = sorted({v[0].name for v in entries("decoders").values()})
    engines = [e.strip() for e in (args.runtimes or "").split(",") if e.strip()]
    for engine in engines:
        if engine not in known:
            raise ConfigError(f"no decoder files for engine '{engine}'", hint=f"choose from: {', '.join(known)}")
    cfg = CompareConfig(model=args.model, out_dir=args.output, policy=Policy(max_ppl_increase_percent=budget))
    out = Path(args.output)
    progress = Progress()

    def write(report: dict) -> None:
        atomic_write_text(out / "tune-report.json", dumps_measured(report, indent=2, default=str) + "\n")
        atomic_write_text(out / "tune-report.html", render_html(report))

    try:
        report = tune_generation(cfg, ModelRef.parse(args.model), engines, search_s, progress=progress,
                                 on_update=write)
    finally:
        progress.close()
    for line in result_lines(report, args.model, out):
        print(line)
    if args.json:
        atomic_write_text(args.json, dumps_measured(report, indent=2, default=str) + "\n")
    if not report["tune"]["winner"]:
        vacuous = bool(report["tune"].get("stopped")) or any(v["outcome"] == "VACUOUS" for v in report["variants"])
        why = ("the float model's own next-token predictions are near uniform (VACUOUS: a random-init model?), so "
               "no perplexity budget means anything" if vacuous else "no decoder file meets the budget")
        print(f"mobilize: {why}; see {out / 'tune-report.json'} for every file's verdict", file=sys.stderr)
        return 2
    return 0


def result_lines(report: dict, model: str, out: Path) -> list[str]:
    """The generation table, the ladder each variant climbed, the pick's reason and the winner."""
    from mobilize.report.terminal import format_table, summary_lines

    tune = report["tune"]
    lines = [format_table(report), "", *summary_lines(report), "", f"search: {tune['rule']}"]
    for step in tune["steps"]:
        ppl = step.get("ppl_increase_percent")
        lines.append(f"  {step['name']:<24} {step['outcome']:<12} "
                     f"{'-' if ppl is None else f'{ppl:+.2f}% ppl':<12} {step.get('stop', '')}")
    lines += [*tune["cut_short"], *([tune["stopped"]] if tune.get("stopped") else []),
              *(f"note: {n}" for n in report.get("notes", []))]
    lines.append(f"report: {out / 'tune-report.json'} and {out / 'tune-report.html'}")
    if tune["winner"]:
        lines.append(f"winner: {tune['winner']}  {tune['winner_path']}  (rebuild: mobilize optimize {model} "
                     f"--recipe {tune['winner']})")
    return lines
