"""``mobilize compare [MODEL] [--plan NAME|FILE] [--data SRC] [--threads N] [--iter N] [-o DIR]``.

With no arguments: the default model (MobileNetV2 trained on digits) on held-out digits with
the default plan.  Prints a progress line per step, then the table sorted by latency, and
writes report.json and report.html (also after every step, so Ctrl-C keeps what was measured).
"""

from __future__ import annotations

import argparse
import sys

from mobilize.cli.bench import _flag


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="every variant side by side: speed, size, accuracy (the main job)",
                       description="Run every variant of a plan on real data and report them side by side.")
    p.add_argument("model", nargs="?", metavar="MODEL", help="model reference (default: zoo:digits_mobilenet_v2)")
    p.add_argument("--plan", default="default", help="built-in plan name or a .yaml/.json file (default: default)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME", help="run only this variant (repeatable)")
    p.add_argument("--data", metavar="SRC", help="accuracy/benchmark data: digits:test, sample-photos, DIR, FILE.npz")
    p.add_argument("--threads", type=int, metavar="N", help="threads for every runtime (default: all cores)")
    _flag(p, "iter", type=int, default=50, help="timed iterations per variant (default 50)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--accuracy-samples", type=int, default=1000, help="max samples for accuracy (default 1000)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per stage before TIMEOUT (default 600)")
    _flag(p, "input_dims", help='input shapes, e.g. "1,3,224,224"')
    p.add_argument("-o", "--output", default="out/compare", metavar="DIR", help="output folder (default out/compare)")
    p.add_argument("--trust-pickle", action="store_true", help="allow unpickling a torch.save()d model file")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mobilize.api import compare
    from mobilize.errors import ConfigError
    from mobilize.report.terminal import format_table, summary_line
    from mobilize.sources.inputs import parse_input_specs

    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads must be at least 1, got {args.threads}")
    specs = parse_input_specs(args.input_dims) if args.input_dims else None
    tty = sys.stderr.isatty()

    def progress(text: str) -> None:
        if tty:
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
        else:
            print(text, file=sys.stderr, flush=True)

    try:
        report = compare(args.model, plan=args.plan, data=args.data, out_dir=args.output, threads=args.threads,
                         iterations=args.iter, rounds=args.rounds, variants=args.variant, input_specs=specs,
                         accuracy_samples=args.accuracy_samples, timeout_s=args.timeout,
                         trust_pickle=args.trust_pickle, progress=progress)
    except KeyboardInterrupt:
        if tty:
            sys.stderr.write("\n")
        print(f"mobilize: interrupted; results so far are in {Path(args.output) / 'report.json'} and report.html",
              file=sys.stderr)
        return 130
    if tty:
        sys.stderr.write("\n")
    print(format_table(report))
    print()
    print(summary_line(report))
    for note in report.get("notes", []):
        print(f"note: {note}")
    out = Path(args.output)
    print(f"wrote {out / 'report.json'} and {out / 'report.html'}")
    return 0
