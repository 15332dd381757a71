"""``mobilize tune MODEL --data SRC --max-drop 1.0 | --min-cosine 0.99 [--runtimes ...] [--time-budget 10m] -o DIR``.

    $ mobilize tune zoo:digits_mobilenet_v2 --data digits:test --max-drop 0.5 -o out/tune
    ...
    winner: onnx-int8-minmax  out/tune/digits_mobilenet_v2-tune.onnx  (recipe out/tune/digits_mobilenet_v2-tune.yaml)
"""

from __future__ import annotations

import argparse
import re

from mobilize.cli.inputs import add_input_flags
from mobilize.errors import ConfigError


def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="find the fastest artifact within an accuracy budget",
                       description="Search recipes (ONNX fp32 / int8 with MinMax, Entropy, Percentile calibration "
                                   "and layers kept in float; ExecuTorch fp32 / int8) for the fastest file whose "
                                   "accuracy stays within the budget; write it, a recipe that rebuilds it, and a "
                                   "report of the search.")
    p.add_argument("model", metavar="MODEL", help="zoo:NAME, file.py:Class, pkg.mod:factory")
    p.add_argument("--data", metavar="SRC", required=True,
                   help="samples every candidate is judged on (labelled for a top-1 budget): digits:test, DIR, FILE.npz")
    p.add_argument("--calibration", metavar="SRC",
                   help="calibration samples for int8 (default: digits:train for digits, else --data)")
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--max-drop", type=float, metavar="POINTS", help="top-1 points a candidate may lose")
    budget.add_argument("--min-cosine", type=float, metavar="C", help="mean cosine to the float outputs (no labels)")
    p.add_argument("--runtimes", default="onnxruntime", help="comma-separated: onnxruntime, executorch "
                                                             "(default: onnxruntime)")
    p.add_argument("--time-budget", metavar="T", help="stop searching after T (e.g. 90s, 10m); the best so far wins")
    p.add_argument("--samples", type=int, default=200, help="evaluation samples (default: 200)")
    p.add_argument("-o", "--output", default="out", metavar="DIR", help="output folder (default: out)")
    add_input_flags(p)
    p.add_argument("--json", metavar="FILE", help="also write the search report here")
    p.add_argument("--trust-pickle", action="store_true", help="allow unpickling a torch.save()d model file")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def parse_duration_s(text: str | None) -> float | None:
    """``90``, ``90s``, ``10m``, ``1h`` -> seconds."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m:
        raise ConfigError(f"cannot read --time-budget '{text}'", hint="write e.g. 90s, 10m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from mobilize.accuracy.verify import Policy
    from mobilize.api import calibration_for, check_output_dir, model_stem
    from mobilize.artifact import atomic_write_text
    from mobilize.cli.inputs import bound_args_from_args, input_specs_from_args
    from mobilize.sources.models import resolve_model
    from mobilize.tune import format_layers, tune

    if args.max_drop is not None and args.max_drop < 0:
        raise ConfigError(f"--max-drop must be >= 0, got {args.max_drop}")
    if args.min_cosine is not None and not 0 < args.min_cosine <= 1:
        raise ConfigError(f"--min-cosine must be in (0, 1], got {args.min_cosine}")
    policy = Policy(max_drop_points=args.max_drop) if args.max_drop is not None else Policy(min_cosine=args.min_cosine)
    budget_s = parse_duration_s(args.time_budget)
    out = check_output_dir(args.output)
    specs = input_specs_from_args(args)
    source = resolve_model(args.model, trust_pickle=args.trust_pickle, bound_args=bound_args_from_args(args))
    if not hasattr(source, "module"):
        raise ConfigError("tune takes a PyTorch model (zoo:, file.py:Class, pkg.mod:factory), not a model file",
                          hint="its recipes export from PyTorch")
    specs = specs or source.input_specs
    calibration = args.calibration or calibration_for(args.data)[0]
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    result = tune(source.module, specs, data=args.data, calibration=calibration, policy=policy, runtimes=runtimes,
                  out_dir=out, stem=model_stem(args.model), time_budget_s=budget_s, eval_samples=args.samples,
                  echo=lambda text: print(text, flush=True))
    print()
    ref = f" (float model top-1 {result.reference_top1:.1f}%)" if result.reference_top1 is not None else ""
    print(f"searched {len(result.candidates)} candidate(s) in {result.search_s:.1f} s{ref}"
          + (" — interrupted" if result.interrupted else ""))
    for c in result.candidates:
        acc = (f"top-1 {c.top1:5.1f}% ({c.drop_points:+.2f})" if c.top1 is not None else
               f"cosine {c.cosine:.4f}" if c.cosine is not None else "")
        speed = f"{c.latency_ms_p50:.3f} ms" if c.latency_ms_p50 is not None else "-"
        why = "WINNER" if c is result.winner else (c.lost or "")
        print(f"  {c.name:<30} {acc:<24} {speed:>10}  {why}")
    for name, layers in result.layers.items():
        print(f"per-layer drift of {name}:")
        for line in format_layers(layers):
            print("  " + line)
    if args.json:
        atomic_write_text(args.json, json.dumps(result.to_json(), indent=2, default=str) + "\n")
    reports = [str(p) for p in result.files if p.name.startswith("tune-report")]
    print(f"report: {' and '.join(reports)}")
    if result.winner is None:
        print("mobilize: no candidate meets the budget; see tune-report.json for every candidate's verdict",
              file=sys.stderr)
        return 2
    tie = f"; a tie with {', '.join(result.tie_with)} (speed difference not significant)" if result.tie_with else ""
    print(f"winner: {result.winner.name}  {result.files[0]}  (recipe {result.files[1]}){tie}")
    return 0
