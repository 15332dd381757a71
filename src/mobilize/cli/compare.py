"""``mobilize compare [MODEL] [--plan NAME|FILE] [--data SRC] [--max-drop P] [-o DIR]``: the main job.

With no arguments: the default model (MobileNetV2 trained on digits) on held-out digits with
the default plan.  Shows a progress bar (plain lines when stderr is not a terminal), then the
table sorted by latency with each verdict's rule, and the recommended variant; writes
report.json and report.html (also after every step, so Ctrl-C keeps what was measured).

Exit codes: 0 done (whatever the variants' outcomes); 2 bad input, or a float reference that failed on the model
or within a --timeout you gave; 3 the float reference ran out of the default time (a slow model or machine: the
report and logs/ stay, and the error says which --timeout to try); 1 a bug in mobilize.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mobilize.cli.bench import _flag
from mobilize.cli.inputs import add_input_flags, add_task_flags, bound_args_from_args, input_specs_from_args, task_from_args
from mobilize.core.target import TARGETS
from mobilize.accuracy.verify import DEFAULT_POLICY


def add_parser(sub) -> None:
    """Long because every one of compare's flags is declared here, each with the help a user reads."""
    p = sub.add_parser("compare", help="every variant side by side: speed, size, accuracy, verdicts (the main job)",
                       description="Build every variant of a plan, check each against the float model on real data, "
                                   "time them in interleaved rounds, and recommend the fastest within your accuracy "
                                   "budget.",
                       epilog="exit status: 0 done; 1 a bug in mobilize; 2 bad input or an unreachable --on device; 3 a "
                              "stage out of its default time; 4 budgets given and no OK file within them, or a file "
                              "regressed against --baseline (the report written); 130 interrupted")
    p.add_argument("model", nargs="?", metavar="MODEL", help="model reference (default: zoo:digits_mobilenet_v2)")
    p.add_argument("--plan", default="default", help="built-in plan name or a .yaml/.json file (default: default; "
                                                     "see `mobilize list plans`)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME", help="run only this variant (repeatable)")
    p.add_argument("--data", metavar="SRC", help="accuracy/benchmark data: digits:test, sample-photos, DIR, FILE.npz "
                                                 "(one array per model input, optional labels y)")
    p.add_argument("--max-drop", type=float, default=DEFAULT_POLICY.max_drop_points, metavar="POINTS",
                   help="accuracy budget: points of the task's measure a variant may lose (top-1 on labelled data "
                        f"for classifiers; boxes, mask IoU, sequences; --metric's units) (default "
                        f"{DEFAULT_POLICY.max_drop_points:g})")
    p.add_argument("--min-cosine", type=float, default=DEFAULT_POLICY.min_cosine, metavar="C",
                   help="accuracy budget without labels (or for embeddings): mean cosine to the float outputs "
                        f"(default {DEFAULT_POLICY.min_cosine:g})")
    p.add_argument("--threads", type=int, metavar="N", help="threads for every runtime (default: all cores)")
    _flag(p, "iter", type=int, default=50, help="timed iterations per variant (default 50)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds every variant runs (default 5); then the "
                                                         "OK variants within noise of the fastest race on")
    p.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="seconds for the timed rounds, racing included (default 30); when it runs out, the variants "
                        "still within noise of the fastest are a tie")
    p.add_argument("--accuracy-samples", type=int, default=1000, help="max samples for accuracy (default 1000)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per stage before TIMEOUT (default 600)")
    add_input_flags(p)
    add_task_flags(p)
    p.add_argument("--max-ppl-increase", type=float, default=None, metavar="PERCENT",
                   help="a causal LM's budget: perplexity increase over the float model on held-out text, in percent "
                        f"(default {DEFAULT_POLICY.max_ppl_increase_percent:g})")
    p.add_argument("--unit", choices=["same-work", "file"], default="same-work",
                   help="what each file's time covers: same-work (from the reference's float input to a float answer, "
                        "the file's own quantize/layout conversions timed with it; default) or file (the file alone, "
                        "on inputs already converted; the table shows it as p50 file either way)")
    _add_frame_flags(p)
    p.add_argument("--prompt-len", type=int, default=32, metavar="P",
                   help="a causal LM: prompt tokens whose prefill is timed (time to first token; default: 32)")
    p.add_argument("--gen-len", type=int, default=32, metavar="G",
                   help="a causal LM: tokens decoded with the KV cache per timed round (default: 32)")
    p.add_argument("--eval-len", type=int, default=None, metavar="T",
                   help="a causal LM: tokens per held-out sequence the perplexity is measured on (default: 128, or the "
                        "model's context less one where that is shorter); --data FILE.txt (or a folder of .txt) "
                        "measures it on your own text")
    p.add_argument("--target", default="host", choices=list(TARGETS),
                   help="the device the files are for (decides ONNX reduce_range, the default int8 engine)")
    p.add_argument("--verify-on", choices=["arm64"], metavar="arm64",
                   help="also check every file on arm64 kernels under QEMU (needs scripts/setup-arm64.sh)")
    p.add_argument("--baseline", metavar="REPORT", help="an earlier compare's report.json (this CPU, this plan): each "
                   "file's speed and verdict against it; a file OK there and now slower beyond noise (and by 1.10x or "
                   "more) or no longer OK exits with status 4, the report written")
    p.add_argument("--max-size-mb", type=float, metavar="MB", help="a budget: pick only a file of at most MB (10^6 "
                   "bytes); with every budget, no file within them exits with status 4, the report written")
    p.add_argument("--max-memory-mb", type=float, metavar="MB",
                   help="a budget on memory: a decoder file's own footprint, a classifier's timing worker peak RSS")
    p.add_argument("--max-latency-ms", type=float, metavar="MS", help="a budget on latency (p50, or --latency-p 90)")
    p.add_argument("--latency-p", type=int, choices=[50, 90], default=50, help="the percentile --max-latency-ms is on")
    p.add_argument("--min-tokens-per-s", type=float, metavar="N", help="a causal LM: a budget on decode tokens/s")
    p.add_argument("--on", action="append", default=None, metavar="DEVICE",
                   help="also check and time every file on DEVICE (repeat; host, arm64, ssh://[user@]host[:port] or "
                        "a `mobilize devices` name): one table, one pick per device; the host times only if named")
    p.add_argument("--arm64-cpu", default=None, metavar="MODEL",
                   help="QEMU CPU model for --verify-on arm64: cortex-a76 (default), cortex-a72, cortex-a53, "
                        "neoverse-n1, max")
    p.add_argument("-o", "--output", default="out/compare", metavar="DIR", help="output folder (default out/compare)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show the runtimes' own stderr output (otherwise kept in DIR/logs)")
    p.add_argument("--trust-pickle", action="store_true", help="allow unpickling a torch.save()d model file")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run, outputs=[("output", "-o", "folder")],
                   inputs=[("model", "MODEL"), ("data", "--data"), ("plan", "--plan"), ("metric", "--metric"),
                           ("frames_from", "--frames-from")])


def _add_frame_flags(p) -> None:
    p.add_argument("--frames", metavar="LAYOUT:WxH[:ROT]",
                   help="also time each file from camera frame to answer (frame -> its input -> inference -> top-5, the "
                        "conversion included; as bench --frames) in the same rounds, and pick on it: nv21, nv12, i420, "
                        "rgb or bgr frames of WxH, rotated ROT degrees clockwise, e.g. nv21:1920x1080")
    p.add_argument("--frames-from", metavar="PATH",
                   help="with --frames: a raw frame file or a folder of them (default: a synthetic moving pattern)")
    p.add_argument("--frame-resize", choices=["nearest", "bilinear"], default=None,
                   help="with --frames: how the centre crop is scaled to the model's input (default nearest)")


def _frames(args: argparse.Namespace) -> dict | None:
    """``--frames`` and its two companions, checked (one line, exit 2) and as the config carries them."""
    from mobilize.core.errors import ConfigError

    if not args.frames:
        for flag, given in (("--frames-from", args.frames_from), ("--frame-resize", args.frame_resize)):
            if given:
                raise ConfigError(f"{flag} needs --frames LAYOUT:WxH", hint="e.g. --frames nv21:1920x1080")
        return None
    from mobilize.camera.frames import parse_frame_spec
    from mobilize.camera.loop import FrameTiming

    return FrameTiming(str(parse_frame_spec(args.frames)), args.frame_resize or "nearest", args.frames_from).to_json()


def run(args: argparse.Namespace) -> int:
    """``mobilize compare``: check every option and combination before any work, then run it and print.

    Long because each flag is checked (one line, exit 2) and turned into the config in one place."""
    import time
    from pathlib import Path

    from mobilize.accuracy.verify import Policy
    from mobilize.api import compare
    from mobilize.core.checks import check_threads
    from mobilize.core.errors import ConfigError
    from mobilize.cli.progress import Progress
    from mobilize.compare.config import CompareConfig
    from mobilize.compare.failures import ReferenceFailed
    from mobilize.core.outcome import Outcome

    check_threads(args.threads, "--threads")
    from mobilize.core.checks import check_at_least

    check_at_least(args.prompt_len, 1, "--prompt-len")
    check_at_least(args.gen_len, 1, "--gen-len")
    devices = _devices(args.on)
    if args.arm64_cpu is not None and not args.verify_on and "arm64" not in devices:
        raise ConfigError("--arm64-cpu picks the emulated CPU of --verify-on arm64, which is not given",
                          hint="add --verify-on arm64, or leave --arm64-cpu out")
    arm64_cpu = args.arm64_cpu or "cortex-a76"
    if args.verify_on:
        from mobilize.arm64 import require_arm64

        require_arm64(arm64_cpu)
    specs = input_specs_from_args(args) or ()
    task, metric = task_from_args(args)
    frames = _frames(args)
    config = CompareConfig(model=args.model or "", data=args.data, input_specs=tuple(specs), out_dir=args.output,
                           threads=args.threads, iterations=args.iter, rounds=args.rounds,
                           **({} if args.time_budget is None else {"time_budget_s": args.time_budget}),
                           accuracy_samples=args.accuracy_samples,
                           timeout_s=600.0 if args.timeout is None else args.timeout,
                           trust_pickle=args.trust_pickle, target=args.target, verbose=args.verbose,
                           policy=Policy(max_drop_points=args.max_drop, min_cosine=args.min_cosine,
                                         **({} if args.max_ppl_increase is None
                                            else {"max_ppl_increase_percent": args.max_ppl_increase})),
                           prompt_tokens=args.prompt_len, gen_tokens=args.gen_len, eval_tokens=args.eval_len,
                           unit=args.unit,
                           bound_args=bound_args_from_args(args), task=task, metric=metric,
                           verify_on=args.verify_on, arm64_cpu=arm64_cpu, frames=frames,
                           devices=devices, timed=not args.on or "host" in args.on, budgets=_budgets(args),
                           baseline=_baseline(args))
    progress = Progress()
    started = int(time.time())  # whole seconds: file systems keep coarse modification times
    try:
        report = compare(args.model, plan=args.plan, config=config, variants=args.variant, progress=progress)
    except ReferenceFailed as exc:
        progress.close()
        out = Path(args.output)
        if getattr(args, "debug", False) and getattr(exc, "child_traceback", None):
            print(f"In the child process:\n{exc.child_traceback}", file=sys.stderr, end="")
        print(f"mobilize: error: {exc}; kept {out / 'report.json'} (failed stage: {exc.failed_stage}) and "
              f"{out / 'logs'}", file=sys.stderr)
        # a stage that ran out of the default time is the model's or the machine's pace, not a bad input
        return 3 if exc.outcome == Outcome.TIMEOUT and args.timeout is None else 2
    except KeyboardInterrupt:
        progress.close()
        report_path = Path(args.output) / "report.json"
        ours = report_path.exists() and report_path.stat().st_mtime >= started  # not an older run's report
        where = f"results so far are in {report_path} and report.html" if ours else "nothing was measured yet"
        print(f"mobilize: interrupted; {where}", file=sys.stderr)
        return 130
    progress.close()
    return _print_and_gate(report, args)


def _print_and_gate(report: dict, args: argparse.Namespace) -> int:
    """The table, the summary and the sections the options add; the exit status (4: a gate closed)."""
    from pathlib import Path

    from mobilize.report.terminal import format_table, summary_lines

    print(format_table(report))
    print()
    for line in summary_lines(report):
        print(line)
    if args.verify_on:
        from mobilize.arm64 import report_lines

        print()
        for line in report_lines(report):
            print(line)
    if report.get("devices"):
        from mobilize.report.devices import device_lines

        print()
        for line in device_lines(report):
            print(line)
    if report.get("baseline"):
        from mobilize.compare.baseline import lines

        print()
        for line in lines(report["baseline"]):
            print(line)
    for note in report.get("notes", []):
        print(f"note: {note}")
    code = _wrote(report, Path(args.output))
    from mobilize.compare.budgets import GATE_EXIT

    if report.get("budgets"):
        from mobilize.compare.budgets import summary_line

        print(summary_line(report["budgets"]))
        if report["budgets"]["none_met"] and code == 0:
            return GATE_EXIT
    if (report.get("baseline") or {}).get("regressions") and code == 0:
        return GATE_EXIT
    return code


def _baseline(args: argparse.Namespace) -> dict | None:
    """``--baseline``'s report, read before any work (the output folder's own report.json is replaced by this run)
    and refused in one line when it is not a compare report, comes from another CPU or ran another plan."""
    if not args.baseline:
        return None
    from mobilize.compare.baseline import check_plan, load_baseline
    from mobilize.core.target import host_cpu

    old = load_baseline(args.baseline, host_cpu().to_json())
    from mobilize.core.errors import UserError
    from mobilize.plans.plan import load_plan

    try:
        name = load_plan(args.plan).name
    except UserError:  # a plan that does not load is compare's own one-line error, said when it loads it
        return old
    check_plan(old, name)
    return old


def _budgets(args: argparse.Namespace) -> dict | None:
    """The budgets given (each a positive number: one line, exit 2 otherwise), or None."""
    from mobilize.core.errors import ConfigError

    given = {"max_size_mb": args.max_size_mb, "max_memory_mb": args.max_memory_mb,
             "max_latency_ms": args.max_latency_ms, "min_tokens_per_s": args.min_tokens_per_s}
    for key, value in given.items():
        if value is not None and not value > 0:
            raise ConfigError(f"--{key.replace('_', '-')} {value:g}: a budget is a positive number")
    if not any(v is not None for v in given.values()):
        return None
    return {**given, "latency_percentile": args.latency_p}


def _devices(on: list[str] | None) -> tuple[str, ...]:
    """``--on``'s devices other than host, each reached and asked what it holds before any work (one line, exit 2
    for an unknown name, a bad address, a device that does not answer or lacks numpy, torch or Python 3.10)."""
    from mobilize.cli.devices import lacking
    from mobilize.core.errors import ConfigError
    from mobilize.devices import resolve

    specs = tuple(dict.fromkeys(d for d in on or () if d != "host"))
    for spec in specs:
        device = resolve(spec)
        if device.kind == "arm64":
            from mobilize.arm64.run import missing

            if missing():
                raise ConfigError(f"cannot run files on arm64: {missing()}")
        if device.kind != "ssh":
            continue
        try:
            lacks = lacking(device.probe())
        finally:
            device.close()
        if lacks:
            raise ConfigError(f"device {spec} lacks {'; '.join(lacks)}",
                              hint=f"`mobilize devices check {spec}` says what is there")
    return specs


def _wrote(report: dict, out) -> int:
    """Say what was written and where the stages' stderr went; exit 2 when files the report names are gone."""
    gone = files_gone(report)
    if gone:  # the results stand, but the files they name are not there to ship
        print(f"mobilize: error: {len(gone)} file(s) {out / 'report.json'} names were deleted during the run, after "
              f"they were built and checked: {', '.join(gone[:3])}{' ...' if len(gone) > 3 else ''} (your --metric "
              f"or model code runs with your permissions and can write under -o); run again to build them",
              file=sys.stderr)
        return 2
    print(f"wrote {out / 'report.json'} and {out / 'report.html'}")
    _say_logs(out)
    return 0


def files_gone(report: dict) -> list[str]:
    """The files the final report names (each variant's artifact) that are not on disk."""
    from pathlib import Path

    named = [v.get("artifact") for v in report.get("variants", [])]
    return [path for path in named if isinstance(path, str) and not Path(path).exists()]  # a decoder file may be a folder


def _say_logs(out: Path) -> None:
    """Where every stage's stderr went (the model's own prints among the runtimes' lines): said once, so nothing
    the model wrote is lost without a word."""
    lines = 0
    for log in sorted((out / "logs").glob("*.log")):
        try:
            lines += sum(1 for line in log.read_text(errors="replace").splitlines() if line.strip())
        except OSError:
            continue
    if lines:
        print(f"logs: {lines} line(s) written to stderr by the stages (the runtimes' and the model's own output) "
              f"are in {out / 'logs'}, one file per stage")
