"""``mobilize lint MODEL``: what in a model is unfriendly to mobile backends, where, what it costs, what to do.

    $ mobilize lint zoo:toy_classifier --target xnnpack --input_dims 1,3,64,64
    lint zoo:toy_classifier: 7 warning(s), 1 info (channels x7, requires-grad x1)
    ...

Exit codes: 0 when the lint ran (whatever it found); 1 with ``--strict`` when any warning fired —
that is the lint's verdict, not a crash (a crash prints "mobilize: internal error" and also
exits 1); 2 for a bad model reference, option or data source.
"""

from __future__ import annotations

import argparse
import sys

from mobilize.core.jsonfile import dumps_measured
from mobilize.cli.inputs import add_input_flags

STRICT_EXIT = 1
"""Exit code of ``--strict`` when a warning fired: the lint verdict, not an internal error."""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "lint", help="check a model for what is unfriendly to mobile backends",
        description="Check a PyTorch model for what mobile backends handle badly (channel counts, unfoldable BN, "
                    "activations, full convolutions, training leftovers, x + y adds, ops a target does not take), "
                    "with the module path, the numbers and a fix, plus a per-layer profile.",
        epilog="exit status: 0 when the lint ran; 1 with --strict when any warning fired (the lint verdict, not a "
               "crash); 2 for a bad model, option or data source",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="zoo:NAME, file.py:Class, pkg.mod:factory, or a torch.save()d model")
    add_input_flags(p)
    p.add_argument("--target", action="append", metavar="T",
                   help="target backend to probe: xnnpack, onnxruntime, nnapi, litert, all or none (repeat or "
                        "comma-separate; default: all)")
    p.add_argument("--data", metavar="SRC", help="real samples (digits, sample-photos, DIR, FILE.npz): adds the measured "
                                                 "int8 error of flagged activations and per-layer time on ONNX Runtime")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="how long building the model may take (default 300; 0: no limit)")
    p.add_argument("--strict", action="store_true", help="exit 1 when any warning fired (for CI)")
    p.add_argument("--top", type=int, default=15, metavar="N", help="profile rows to print (default 15)")
    p.add_argument("--xnnpack-lower", action="store_true",
                   help="lower completely for XNNPACK instead of stopping after partitioning (slower, same support)")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="threads for the per-layer timing (default 1)")
    p.add_argument("--trust-pickle", action="store_true", help="allow unpickling a torch.save()d model file")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run, outputs=[("json", "--json", "file")], inputs=[("model", "MODEL"), ("data", "--data")])


def run(args: argparse.Namespace) -> int:
    from mobilize.core.artifact import atomic_write_text
    from mobilize.cli.check import check_data, check_model
    from mobilize.core.errors import ConfigError
    from mobilize.pipeline.isolate import run_isolated
    from mobilize.lint import LintConfig, parse_targets
    from mobilize.lint.terminal import format_report
    from mobilize.cli.inputs import bound_args_from_args, input_specs_from_args

    if args.top < 0:
        raise ConfigError(f"--top must be 0 or more, got {args.top}")
    if args.threads < 1:
        raise ConfigError(f"--threads must be at least 1, got {args.threads}")
    specs = input_specs_from_args(args)
    bound_args = bound_args_from_args(args)
    if not args.timeout >= 0:
        raise ConfigError(f"--timeout must be 0 (no limit) or a number of seconds, got {args.timeout}")
    config = LintConfig(targets=parse_targets(args.target), xnnpack_lower=args.xnnpack_lower,
                        time_threads=args.threads, build_timeout_s=args.timeout or None)
    model_specs, names = check_model(args.model, command="lint", input_specs=specs or (),
                                     trust_pickle=args.trust_pickle, pytorch_only=True, bound_args=bound_args,
                                     timeout_s=args.timeout or None)
    if args.data:
        check_data(args.data, "--data", model_specs, names)
    # the model's code runs in a child process: a crash in its forward is one line, not the end of this one
    report = run_isolated(check, args.model, config, what="lint", input_specs=specs, data=args.data,
                          trust_pickle=args.trust_pickle, bound_args=bound_args)
    print(format_report(report, top=args.top))
    if args.json:
        atomic_write_text(args.json, dumps_measured(report.to_json(), indent=2, default=str) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.strict and report.fired:
        print(f"lint: {len(report.warnings)} warning(s) fired; exit {STRICT_EXIT} because of --strict "
              f"(the lint verdict, not an error)", file=sys.stderr)
        return STRICT_EXIT
    return 0


def check(reference: str, config, *, input_specs, data, trust_pickle: bool, bound_args, progress):
    """lint's work, in its child process."""
    from mobilize.lint import lint

    progress(0, 1, "build the model and check it")
    return lint(reference, config, input_specs=input_specs, data=data, trust_pickle=trust_pickle,
                bound_args=bound_args)
