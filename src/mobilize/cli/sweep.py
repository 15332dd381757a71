"""``mobilize sweep MODELS... | --models FILE [--plan P] [--data SRC] [--executor local|ray[:ADDRESS]] [--resume]
-o DIR``.

Runs compare for every model (one report each in DIR/<model>/) and writes an index (terminal
table, DIR/index.json, DIR/index.html); ``--resume`` runs only what has no result yet.
"""

from __future__ import annotations

import argparse
import sys

from mobilize.cli.bench import _flag
from mobilize.core.target import TARGETS


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="compare many models with one plan, locally or on a Ray cluster; resumable",
                       description="Run compare for every model, one report each plus an index with each model's "
                                   "recommended variant, speed-up, accuracy drop and outcome counts.")
    p.add_argument("models", nargs="*", metavar="MODEL", help="model references")
    p.add_argument("--models", dest="models_file", metavar="FILE",
                   help="a file with one model per line: MODEL [--input_dims D] [--variant NAME ...]")
    p.add_argument("--plan", default="default", help="built-in plan name or a .yaml/.json file (default: default)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME",
                   help="run only this variant for every model (repeatable; a models-file line may give its own)")
    _flag(p, "input_dims", help='input shapes for every model given on the command line, e.g. "1,3,224,224" '
                                '(one syntax with compare: "1,128;1,128", "()" for a scalar)')
    _flag(p, "input_type", help='input types for every model given on the command line, e.g. "int64;int64"')
    p.add_argument("--data", metavar="SRC", help="accuracy/benchmark data for every model (default: per model, "
                                                 "as compare chooses)")
    p.add_argument("--executor", default="local", metavar="local|ray[:ADDRESS]",
                   help="local (default: one model after the other here), ray (a new one-node Ray cluster here), "
                        "ray:auto (the cluster this machine belongs to) or ray:ADDRESS; each timing node needs a "
                        "'mobilize_bench' resource of 1")
    p.add_argument("--resume", action="store_true", help="keep every model that already has a result in DIR")
    p.add_argument("--threads", type=int, metavar="N", help="threads for every runtime (default: all cores)")
    _flag(p, "iter", type=int, default=50, help="timed iterations per variant (default 50)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--accuracy-samples", type=int, default=1000, help="max samples for accuracy (default 1000)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per compare stage (default 600)")
    p.add_argument("--max-retries", type=int, default=2, help="Ray: retries of a model whose worker was lost "
                                                               "(default 2)")
    p.add_argument("--target", default="host", choices=list(TARGETS),
                   help="the device the files are for")
    p.add_argument("-o", "--output", default="out/sweep", metavar="DIR", help="output folder (default out/sweep)")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run, outputs=[("output", "-o", "folder")],
                   inputs=[("models", "MODEL"), ("models_file", "--models"), ("data", "--data"), ("plan", "--plan")])


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mobilize.core.checks import check_at_least
    from mobilize.cli.progress import Progress
    from mobilize.core.errors import ConfigError
    from mobilize.sweep import SweepConfig, sweep
    from mobilize.sweep.index import format_table
    from mobilize.sweep.jobs import ModelEntry, ModelJob, parse_models_text

    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads must be at least 1, got {args.threads}")
    if args.input_type and not args.input_dims:
        raise ConfigError("--input_type needs --input_dims")
    check_at_least(args.max_retries, 0, "--max-retries")
    defaults = ModelJob("", args.input_dims, tuple(args.variant), input_type=args.input_type)
    jobs = [ModelJob(m, args.input_dims, tuple(args.variant), input_type=args.input_type) for m in args.models]
    if args.models_file:
        try:
            text = Path(args.models_file).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read --models {args.models_file}: {exc.strerror}") from None
        jobs += parse_models_text(text, defaults)
    if not jobs:
        raise ConfigError("no models to sweep", hint="give MODEL arguments or --models FILE")
    from mobilize.compare.config import CompareConfig

    cfg = SweepConfig(out_dir=args.output, executor=args.executor, resume=args.resume, max_retries=args.max_retries,
                      compare=CompareConfig(data=args.data, threads=args.threads, iterations=args.iter,
                                            rounds=args.rounds, accuracy_samples=args.accuracy_samples,
                                            timeout_s=args.timeout, target=args.target))
    out = Path(args.output)
    progress = Progress()
    try:
        index = sweep(jobs, args.plan, cfg, progress=progress)
    except KeyboardInterrupt:
        progress.close()
        print(f"mobilize: interrupted; finished models are in {out / 'index.json'}; rerun with --resume to run "
              f"the rest", file=sys.stderr)
        return 130
    progress.close()
    print(format_table([ModelEntry.from_json(m) for m in index["models"]]))
    print()
    counts = ", ".join(f"{v} {k}" for k, v in sorted(index["status_counts"].items()))
    print(f"models: {counts}; speed-ups are each model's own (recommended vs its plan's reference, same machine)")
    print(f"wrote {out / 'index.json'} and {out / 'index.html'} (one report per model in {out}/<model>/)")
    return 0
