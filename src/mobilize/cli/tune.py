"""``mobilize tune MODEL --data SRC --max-drop 1.0 | --min-cosine 0.99 [--runtimes ...] [--time-budget 10m] -o DIR``;
for a causal LM ``mobilize tune zoo:tiny_lm [--max-ppl-increase 5] [--runtimes ...] -o DIR`` (no --data: the held-out
text is the model's own).

    $ mobilize tune zoo:digits_mobilenet_v2 --data digits:test --max-drop 0.5 -o out/tune
    ...
    winner: onnx-int8-minmax  out/tune/digits_mobilenet_v2-tune.onnx  (recipe out/tune/digits_mobilenet_v2-tune.yaml)
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from mobilize.cli.inputs import add_input_flags, add_task_flags
from mobilize.core.errors import ConfigError
from mobilize.tune.prune import FINETUNE_MAX_STEPS
from mobilize.core.target import TARGETS


def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="find the fastest artifact within an accuracy budget",
                       description="Search recipes (ONNX fp32 / int8 with MinMax, Entropy, Percentile calibration "
                                   "and layers kept in float; ExecuTorch fp32 / int8) for the fastest file whose "
                                   "accuracy stays within the budget; write it, a recipe that rebuilds it, and a "
                                   "report of the search.")
    p.add_argument("model", metavar="MODEL", help="zoo:NAME, file.py:Class, pkg.mod:factory")
    p.add_argument("--data", metavar="SRC",
                   help="samples every candidate is judged on (labelled for a top-1 budget): digits:test, DIR, "
                        "FILE.npz; required except for a causal LM (--task generation), judged on its held-out text")
    p.add_argument("--calibration", metavar="SRC",
                   help="calibration samples for int8 (default: digits:train for digits, else --data)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--max-drop", type=float, metavar="POINTS",
                        help="points of the task's measure a candidate may lose (top-1 for a classifier)")
    budget.add_argument("--min-cosine", type=float, metavar="C", help="mean cosine to the float outputs (no labels)")
    from mobilize.accuracy.verify import DEFAULT_POLICY

    budget.add_argument("--max-ppl-increase", type=float, metavar="PERCENT",
                        help="a causal LM's budget: held-out perplexity increase over the float model, in percent "
                             f"(default {DEFAULT_POLICY.max_ppl_increase_percent:g})")
    from mobilize.tune.routes import default_runtimes, runtimes as searched

    p.add_argument("--runtimes", help=f"comma-separated: {', '.join(searched())} (every engine that declares a "
                                      f"tune route; default: {', '.join(default_runtimes())}); for a causal LM, the engines whose decoder "
                                      "files are searched (default: all)")
    p.add_argument("--time-budget", metavar="T", help="stop searching after T (e.g. 90s, 10m); the best so far wins")
    p.add_argument("--samples", type=int, default=200, help="evaluation samples (default: 200)")
    p.add_argument("--prune", nargs="?", const="", metavar="LEVELS",
                   help="also search structured pruning (fractions of the MACs removed, default 0.3,0.5,0.7), each with a "
                        "fine-tune distilled from the float model on the labelled --calibration data")
    p.add_argument("--prune-steps", type=int, default=FINETUNE_MAX_STEPS, metavar="N", action=_Given,
                   help=f"most optimizer steps (batches of 32) each level's fine-tune takes (default {FINETUNE_MAX_STEPS}; "
                        "0: no cap, 8 full epochs however large --calibration is)")
    p.add_argument("--target", default="host", choices=list(TARGETS),
                   help="the device the files are for (decides ONNX reduce_range)")
    p.add_argument("-o", "--output", default="out", metavar="DIR", help="output folder (default: out)")
    add_input_flags(p)
    add_task_flags(p)
    p.add_argument("--json", metavar="FILE", help="also write the search report here")
    p.add_argument("--trust-pickle", action="store_true", help="allow unpickling a torch.save()d model file")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run, outputs=[("output", "-o", "folder"), ("json", "--json", "file")],
                   inputs=[("model", "MODEL"), ("data", "--data"), ("calibration", "--calibration"),
                           ("metric", "--metric")])


class _Given(argparse.Action):
    """Stores the value and records that the option was given (``DEST_given``): an option that only means something
    beside another one is refused when that one is missing, not ignored."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def parse_duration_s(text: str | None) -> float | None:
    """``90``, ``90s``, ``10m``, ``1h`` -> seconds."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m:
        raise ConfigError(f"cannot read --time-budget '{text}'", hint="write e.g. 90s, 10m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def run(args: argparse.Namespace) -> int:
    """``mobilize tune``: check every option and combination before any work, then run it and print."""
    from mobilize.generation.detect import wants_generation
    from mobilize.sources.reference import ModelRef

    if wants_generation(args.task, ModelRef.parse(args.model)):
        from mobilize.cli.tune_generation import run_generation

        return run_generation(args)
    options = _checked_options(args)  # everything a user can get wrong, before the float model is built
    options.update(_checked_model(args, options["prune"]))
    result = _search_isolated(args, options)
    _print_result(result, args)
    return _finish(result, args)


def _checked_options(args: argparse.Namespace) -> dict[str, Any]:
    """The budget, the runtimes, the task and the pruning levels, each flag checked (one line, exit 2)."""
    from mobilize.accuracy.verify import Policy
    from mobilize.cli.inputs import task_from_args
    from mobilize.core.checks import check_at_least, check_positive
    from mobilize.core.target import Target
    from mobilize.tune import candidate_recipes
    from mobilize.tune.prune import parse_levels

    if args.data is None:
        raise ConfigError("tune needs --data: the samples every candidate is judged on",
                          hint="e.g. --data digits:test, a folder of images, or FILE.npz")
    if args.max_ppl_increase is not None:
        raise ConfigError("--max-ppl-increase is a causal LM's budget; this model is not one",
                          hint="give --max-drop POINTS or --min-cosine C (or --task generation for a causal LM)")
    if args.max_drop is None and args.min_cosine is None:
        raise ConfigError("tune needs a budget: --max-drop POINTS or --min-cosine C")
    policy = Policy(max_drop_points=args.max_drop) if args.max_drop is not None else Policy(min_cosine=args.min_cosine)
    budget_s = parse_duration_s(args.time_budget)
    if budget_s is not None:
        check_positive(budget_s, "--time-budget", " seconds")
    check_at_least(args.samples, 1, "--samples")
    runtimes = _runtimes(args.runtimes)
    candidate_recipes(runtimes)
    task, metric = task_from_args(args)
    prune = parse_levels(args.prune) if args.prune is not None else ()
    if getattr(args, "prune_steps_given", False) and args.prune is None:
        raise ConfigError("--prune-steps caps the fine-tune of --prune, which is not given",
                          hint="add --prune, or leave --prune-steps out")
    if args.prune_steps < 0:
        raise ConfigError(f"--prune-steps must not be negative, got {args.prune_steps}",
                          hint="give the most fine-tune steps per level, or 0 for no cap")
    Target.parse(args.target)
    return dict(policy=policy, time_budget_s=budget_s, runtimes=runtimes, task=task, metric=metric, prune=prune,
                prune_finetune_steps=args.prune_steps, target=args.target, eval_samples=args.samples, data=args.data)


def _runtimes(given: str | None) -> list[str]:
    """``--runtimes`` as a list (not given: the runtimes tune searches by default); an empty one is refused."""
    from mobilize.tune.routes import default_runtimes, runtimes as searched

    runtimes = [r.strip() for r in (",".join(default_runtimes()) if given is None else given).split(",") if r.strip()]
    if not runtimes:
        raise ConfigError("--runtimes is empty", hint=f"choose from: {', '.join(searched())}")
    return runtimes


def _checked_model(args: argparse.Namespace, prune: Any) -> dict[str, Any]:
    """The model's input specs and bound arguments, and the data and calibration checked against them."""
    from mobilize.api import calibration_for
    from mobilize.cli.check import check_data, check_model
    from mobilize.cli.inputs import bound_args_from_args, input_specs_from_args

    bound_args = bound_args_from_args(args)
    specs, names = check_model(args.model, command="tune", input_specs=input_specs_from_args(args) or (),
                               trust_pickle=args.trust_pickle, pytorch_only=True, bound_args=bound_args)
    calibration = args.calibration or calibration_for(args.data)[0]
    check_data(args.data, "--data", specs, names, labelled_for="--max-drop" if args.max_drop is not None
               and args.task in (None, "classification") and not args.metric else None)
    if calibration != args.data or prune:  # the pruned levels' fine-tune learns from labels: checked before work
        check_data(calibration, "--calibration" if args.calibration else "--data", specs, names,
                   labelled_for="--prune" if prune else None)
    return dict(specs=specs, bound_args=bound_args, calibration=calibration)


def _search_isolated(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    """The search in a child process (a crash in the model's code is one line, not the end of this one); a cache
    this run started is removed when it fails."""
    import shutil
    from pathlib import Path

    from mobilize.api import model_stem
    from mobilize.pipeline.isolate import run_isolated

    out = Path(args.output)
    cache = out / "tune-cache"
    cache_was_there = cache.exists()
    specs = options.pop("specs")
    try:
        return run_isolated(search, args.model, specs, what="tune", graceful_interrupt=True,
                            progress=lambda _done, _total, text: print(text, flush=True),
                            trust_pickle=args.trust_pickle, out_dir=out, stem=model_stem(args.model), **options)
    except BaseException:
        if not cache_was_there:
            shutil.rmtree(cache, ignore_errors=True)  # half a cache of a failed run only misleads the next one
        raise


def _accuracy_text(c: Any) -> str:
    """A candidate's accuracy as the table shows it: top-1, the task's measure, or cosine."""
    m = c.measure or {}
    acc = (f"top-1 {c.top1:5.1f}% ({c.drop_points:+.2f})" if c.top1 is not None else
           f"{m['column'].removesuffix(' %')} {m['value']:5.1f}% ({m['drop']:+.2f})"
           if m.get("value") is not None and m.get("percent") and m.get("rule") != "cosine" else
           f"{m['column']} {m['value']:.4g} ({m['drop']:+.4g})" if m.get("value") is not None and
           m.get("rule") != "cosine" else f"cosine {c.cosine:.4f}" if c.cosine is not None else "")
    if m.get("rule") == "cosine" and m.get("value") is not None:  # judged on cosine, the measure beside it
        acc += f", {m['column'].removesuffix(' %')} {m['value']:.1f}%"
    return acc


def _print_result(result: Any, args: argparse.Namespace) -> None:
    """The candidates' table, the task, the cuts, pruning, choices, threads and per-layer drift; the JSON file."""
    from mobilize.core.artifact import atomic_write_text
    from mobilize.core.jsonfile import dumps_measured
    from mobilize.tune import format_layers
    from mobilize.tune.prune import line as pruned_line

    print()
    ref = f" (float model top-1 {result.reference_top1:.1f}%)" if result.reference_top1 is not None else ""
    print(f"searched {len(result.candidates)} candidate(s) in {result.search_s:.1f} s{ref}"
          + (" — interrupted" if result.interrupted else ""))
    for c in result.candidates:
        speed = f"{c.latency_ms_p50:.3f} ms" if c.latency_ms_p50 is not None else "-"
        why = "WINNER" if c is result.winner else (c.lost or "")
        print(f"  {c.name:<30} {_accuracy_text(c):<24} {speed:>10}  {why}")
    if result.task:
        print(result.task["text"])
    for line in result.cut_short:
        print(line)
    for c in result.candidates:
        if c.pruned:
            print(pruned_line(c.name, c.pruned, c.top1, c.top1_ci))
    for choice in result.choices:
        print(choice["line"])
    if result.threads:
        print(result.threads["line"])
    for name, layers in result.layers.items():
        print(f"per-layer drift of {name}:")
        for line in format_layers(layers):
            print("  " + line)
    if args.json:
        atomic_write_text(args.json, dumps_measured(result.to_json(), indent=2, default=str) + "\n")


def _finish(result: Any, args: argparse.Namespace) -> int:
    """Where the reports are, and the winner (exit 0) or why there is none (exit 2)."""
    import sys

    reports = [str(p) for p in result.files if p.name.startswith("tune-report")]
    print(f"report: {' and '.join(reports)}")
    if result.winner is None and not result.candidates and not result.interrupted:
        raise ConfigError(f"the time budget ({args.time_budget}) ran out before any candidate was built",
                          hint="give a longer --time-budget")
    if result.winner is None:
        print("mobilize: no candidate meets the budget; see tune-report.json for every candidate's verdict",
              file=sys.stderr)
        return 2
    tie = f"; a tie with {', '.join(result.tie_with)} (speed difference not significant)" if result.tie_with else ""
    print(f"winner: {result.winner.name}  {result.files[0]}  (recipe {result.files[1]}){tie}")
    return 0


def search(reference: str, specs: list, *, trust_pickle: bool, bound_args: dict, progress, **options) -> Any:
    """tune's work, in its child process: build the model, search, write the files; returns the TuneResult."""
    from mobilize.sources.models import resolve_model
    from mobilize.tune import tune

    progress(0, 0, "build the float model and run it on the samples")
    source = resolve_model(reference, trust_pickle=trust_pickle, bound_args=bound_args)
    return tune(source.module, specs, echo=lambda text: progress(0, 0, text), **options)
