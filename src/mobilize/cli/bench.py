"""``mobilize bench MODEL``: speed_benchmark_torch's flags and lines, plus full statistics.

    $ mobilize bench model.pt --use_bundled_input 0 --iter 200 --json bench.json
    Starting benchmark.
    Running warmup runs.
    Main runs.
    Main run finished. Microseconds per iter: 812.405. Iters per second: 1230.913
    ...statistics block...
"""

from __future__ import annotations

import argparse
import shutil
import sys

from mobilize.core.jsonfile import dumps_measured
from mobilize.core.artifact import atomic_write_text
from mobilize.cli.inputs import add_input_flags, bound_args_from_args, input_specs_from_args


def _flag(parser: argparse.ArgumentParser, name: str, **kw) -> None:
    """Accept speed_benchmark_torch's spelling (--input_dims) and kebab-case (--input-dims)."""
    spellings = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
    parser.add_argument(*spellings, dest=name, **kw)


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark a model or artifact like speed_benchmark_torch",
                       description="Benchmark any model reference or artifact file the same way.")
    p.add_argument("model_pos", nargs="?", metavar="MODEL",
                   help="zoo:NAME, file.py:Class, pkg.mod:factory, or a .pt/.ptl/.pt2/.pte/.onnx file")
    _flag(p, "model", help="same as MODEL (speed_benchmark_torch spelling)")
    add_input_flags(p, memory_format=True)
    _flag(p, "no_inputs", action="store_true", help="call the model with no inputs")
    _flag(p, "use_bundled_input", type=int, metavar="N", help="use the N-th input bundled in the file")
    _flag(p, "print_output", action="store_true", help="print the model's outputs")
    _flag(p, "warmup", type=int, default=10, help="untimed warm-up runs (default 10)")
    _flag(p, "iter", type=int, default=100, help="timed iterations (default 100)")
    _flag(p, "report_pep", action="store_true", help="print a PyTorchObserver line per iteration")
    _flag(p, "pthreadpool_size", type=int, metavar="N", help="thread pool size (same as --threads)")
    p.add_argument("--threads", type=int, metavar="N", help="intra-op threads (default: all cores)")
    p.add_argument("--runtime", help="runtime to use (default: the one for the file's format)")
    p.add_argument("--native", action="store_true",
                   help="run the file in a C++ benchmark built against the installed LibTorch/ExecuTorch "
                        "(no Python in the timed process; built once, cached)")
    p.add_argument("--on", metavar="DEVICE",
                   help="time the file on DEVICE: ssh://[user@]host[:port] or a `mobilize devices` name (a Python "
                        "child there); arm64 with --native: the aarch64 benchmark in the arm64 root under QEMU "
                        "(scripts/setup-arm64.sh; emulated times, never shown as latency)")
    p.add_argument("--cpu", metavar="MODEL",
                   help="with --on arm64: QEMU CPU model (cortex-a76 by default, cortex-a72, cortex-a53, neoverse-n1, "
                        "max)")
    p.add_argument("--io-binding", action="store_true",
                   help="ONNX Runtime: bind inputs once and write outputs into preallocated buffers")
    p.add_argument("--data", metavar="SRC", help="take the input from a data source (digits, sample-photos, DIR, FILE.npz)")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--profile", action="store_true",
                   help="after the benchmark, time every op of a .pte/.bpte (ETDump) or .onnx (ONNX Runtime profiler) "
                        "file: the share of time inside vs outside the delegate, and a WARNING when a few ops "
                        "outside it dominate")
    p.add_argument("--frames", metavar="LAYOUT:WxH[:ROT]",
                   help="time camera frame -> model input -> inference -> top-k, each stage: nv21, nv12, i420, rgb "
                        "or bgr frames of WxH, rotated ROT degrees clockwise, e.g. nv21:1920x1080:90")
    p.add_argument("--frames-from", metavar="PATH",
                   help="with --frames: a raw frame file or a folder of them (default: a synthetic moving pattern)")
    p.add_argument("--frame-resize", choices=["nearest", "bilinear"], default="nearest",
                   help="with --frames: how the centre crop is scaled to the model's input (default nearest)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--task", choices=["generation"],
                   help="generation: a decoder file (or zoo:tiny_lm, a saved transformers folder) timed in tokens: "
                        "time to first token for --prompt-len tokens, then microseconds per token decoding --gen-len "
                        "tokens with the KV cache")
    p.add_argument("--prompt-len", type=int, metavar="P", help="with --task generation (default 32)")
    p.add_argument("--gen-len", type=int, metavar="G", help="with --task generation (default 32)")
    p.add_argument("--from-log", metavar="FILE",
                   help="do not run: read one speed_benchmark_torch output (a phone's, e.g. from nnapi_benchmark.sh) "
                        "into the same report; give the flags the device run used (--model, --pthreadpool_size, ...)")
    p.add_argument("--trust-pickle", action="store_true",
                   help="allow unpickling a torch.save()d model file (runs code from the file)")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run, outputs=[("json", "--json", "file")],
                   inputs=[("model_pos", "MODEL"), ("model", "--model"), ("data", "--data"), ("frames_from", "--frames-from"),
                           ("from_log", "--from-log")])


def run(args: argparse.Namespace) -> int:
    """``mobilize bench``: check every option and combination before any work, then run it and print.

    Long because each flag is checked (one line, exit 2) and turned into the config in one place."""
    from mobilize.api import bench
    from mobilize.bench.harness import BenchConfig
    from mobilize.core.checks import check_at_least, check_threads
    from mobilize.core.errors import ConfigError

    reference = args.model_pos or args.model
    if args.from_log:
        return _from_log(args, reference)
    if not reference:
        raise ConfigError("no model given", hint="mobilize bench MODEL (try zoo:mobilenet_v2)")
    if args.model_pos and args.model and args.model_pos != args.model:
        raise ConfigError(f"two models given: '{args.model_pos}' and --model '{args.model}'")
    check_threads(args.threads, "--threads")
    check_threads(args.pthreadpool_size, "--pthreadpool_size")
    if None not in (args.threads, args.pthreadpool_size) and args.threads != args.pthreadpool_size:
        raise ConfigError(f"--threads {args.threads} and --pthreadpool_size {args.pthreadpool_size} disagree",
                          hint="give one of them")
    threads = args.threads if args.threads is not None else args.pthreadpool_size
    check_at_least(args.warmup, 0, "--warmup")
    check_at_least(args.iter, 1, "--iter")
    _token_lengths(args)
    if args.task == "generation":
        return _generation(args, reference, threads)
    specs = input_specs_from_args(args)
    bound = bound_args_from_args(args)
    _refuse_unmeasured(reference, args.runtime)
    if args.frames and args.profile:
        raise ConfigError("--profile times the model alone; leave out --frames or --profile")
    if args.profile:
        from mobilize.cli._bench_profile import check as check_profile

        check_profile(reference)
    if args.on == "host":
        args.on = None
    if args.on and args.on != "arm64":
        from mobilize.cli._bench_device import bench_on_device

        if args.cpu:
            raise ConfigError("--cpu picks the emulated CPU of --on arm64", hint="leave --cpu out")
        return bench_on_device(args, reference, specs, threads)
    if args.on:
        _check_on(args)
    elif args.cpu:
        raise ConfigError("--cpu picks the emulated CPU of --on arm64", hint="add --native --on arm64, or leave --cpu out")
    if args.frames_from and not args.frames:
        raise ConfigError("--frames-from needs --frames LAYOUT:WxH", hint="e.g. --frames nv21:1920x1080")
    if args.frames:
        from mobilize.camera.frames import parse_frame_spec

        frame_spec = parse_frame_spec(args.frames)
        from functools import partial

        if args.native:
            from mobilize.native.frames import bench_native_frames as frames_bench
        else:
            from mobilize.camera.bench import bench_frames as frames_bench
        bench = partial(frames_bench, spec=frame_spec, source=args.frames_from, resize=args.frame_resize)
    elif args.on == "arm64":
        from functools import partial

        from mobilize.arm64.native import bench_native_arm64

        bench = partial(bench_native_arm64, cpu=args.cpu or "cortex-a76")
    elif args.native:
        from mobilize.native.runner import bench_native as bench
    report = bench(reference, BenchConfig(
        warmup=args.warmup, iterations=args.iter, report_pep=args.report_pep, runtime=args.runtime, threads=threads,
        input_specs=tuple(specs or ()), no_inputs=args.no_inputs, bundled_input=args.use_bundled_input,
        data=args.data, seed=args.seed, trust_pickle=args.trust_pickle, io_binding=args.io_binding,
        bound_args=bound))
    outputs = report.pop("_outputs")
    if args.print_output:
        for i, out in enumerate(outputs):
            print(f"Output {i}: {out}")
    if args.on == "arm64":
        from mobilize.arm64.native import format_report

        print(format_report(report))
    else:
        print(format_stats(report))
    if "frames" in report:
        from mobilize.camera.bench import format_stages

        print(format_stages(report))
    if args.profile:
        from mobilize.cli._bench_profile import add_profile

        print("\n".join(add_profile(report, reference, args)))
    if args.json:
        atomic_write_text(args.json, dumps_measured(report, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def _check_on(args: argparse.Namespace) -> None:
    """``--on arm64`` runs the aarch64 build of the native benchmark; what it cannot combine with, in one line."""
    from mobilize.arm64.run import check_cpu
    from mobilize.core.errors import ConfigError

    if not args.native:
        raise ConfigError("--on arm64 runs the native benchmark built for aarch64: add --native",
                          hint="to check a file's outputs on arm64 kernels: mobilize verify FILE --on arm64")
    for flag, given in (("--frames", args.frames), ("--profile", args.profile), ("--report_pep", args.report_pep)):
        if given:
            raise ConfigError(f"{flag} is not offered with --on arm64 (emulated times are not latency)")
    check_cpu(args.cpu or "cortex-a76")


def _refuse_unmeasured(reference: str, runtime: str | None) -> None:
    """A runtime that only checks numbers on this host (``measures_latency = False``) gives no latency figure."""
    from pathlib import Path

    from mobilize.core.errors import ConfigError
    from mobilize.runtimes import RUNTIMES
    from mobilize.runtimes.base import runtime_for

    if runtime is None and not Path(reference).is_file():
        return
    if runtime is None:
        from mobilize.core.artifact import Artifact

        cls = runtime_for(Artifact.from_file(reference).format)
    else:
        cls = RUNTIMES.get(runtime)
    if not cls.measures_latency:
        raise ConfigError(f"runtime '{cls.name}' checks this file's numbers on the host but is not the device's "
                          f"runtime: its latency is on device only",
                          hint="run the file on the device (nnapi_benchmark.sh beside it), then "
                               "`mobilize bench --from-log LOG`")


def _from_log(args: argparse.Namespace, reference: str | None) -> int:
    from mobilize.core.backend import tool_anywhere
    from mobilize.core.errors import ConfigError
    from mobilize.report.bench_report import BenchReport

    found = tool_anywhere("from_log")  # the engine whose device benchmark writes the log (NNAPI's adb script)
    if found is None:
        raise ConfigError("--from-log: no engine here reads a device benchmark's log")
    engine, report_from_log = found
    fields = report_from_log(args.from_log, model=reference, threads=args.pthreadpool_size or args.threads,
                             warmup=args.warmup, iterations=args.iter, bundled_input=args.use_bundled_input)
    report = BenchReport(**fields).to_json()
    print(engine.entry("tools", "format_log_report")(report))
    if args.json:
        atomic_write_text(args.json, dumps_measured(report, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def format_stats(r: dict) -> str:
    lines = [
        f"Statistics: {r['model']} ({r['format']}, runtime {r['runtime']}, {r['threads']} thread(s), "
        f"{r['iterations']} iterations after {r['warmup']} warm-up, input {r['input_source']})",
        f"  latency ms   mean {r['latency_ms_mean']:.3f}  p50 {r['latency_ms_p50']:.3f}  p90 {r['latency_ms_p90']:.3f}"
        f"  p99 {r['latency_ms_p99']:.3f}",
        f"               min {r['latency_ms_min']:.3f}  max {r['latency_ms_max']:.3f}  std {r['latency_ms_std']:.3f}"
        f"  iters/s {r['iters_per_s']:.1f}",
        f"  load {r['load_ms']:.1f} ms   first run {r['first_run_ms']:.3f} ms   peak RSS {r['peak_rss_mb']:.1f} MB"
        f"   size {r['size_bytes'] / 1e6:.2f} MB",
    ]
    lines += [f"  note: {n}" for n in r["notes"]]
    return "\n".join(lines)


def _token_lengths(args: argparse.Namespace) -> None:
    """--prompt-len and --gen-len: their defaults with --task generation, refused without it (they time nothing
    else, and a model that is not a decoder was timed as if they had not been typed)."""
    from mobilize.core.errors import ConfigError

    given = [f"{flag} {value}" for flag, value in (("--prompt-len", args.prompt_len), ("--gen-len", args.gen_len))
             if value is not None]
    if args.task != "generation" and given:
        raise ConfigError(f"{' and '.join(given)}: only with --task generation (the token lengths a decoder is timed "
                          f"at)",
                          hint="add --task generation for a decoder file, or leave them out")
    args.prompt_len = DEFAULT_TOKENS if args.prompt_len is None else args.prompt_len
    args.gen_len = DEFAULT_TOKENS if args.gen_len is None else args.gen_len


CRASH_HINT = ("the engine named above crashed in its own native code at that step, which says nothing against the "
              "file: rerun with --debug for the engine's log, try the model's file from another engine, or reinstall "
              "the engine (bash scripts/setup.sh; llama.cpp: bash scripts/setup-llamacpp.sh)")
"""What a native crash in a decoder bench's child is told to try (its stage names the engine and the step)."""

DEFAULT_TOKENS = 32
"""--prompt-len and --gen-len when not given (with --task generation)."""


def _generation(args: argparse.Namespace, reference: str, threads: int | None) -> int:
    """``--task generation``: prefill and decode timed in tokens (:mod:`mobilize.cli._bench_generation`)."""
    from mobilize.cli._bench_generation import bench_generation, lines
    from mobilize.generation.model import check_decoder_lengths
    from mobilize.core.checks import check_at_least, default_threads

    check_at_least(args.prompt_len, 1, "--prompt-len")
    check_at_least(args.gen_len, 1, "--gen-len")
    check_decoder_lengths(args.prompt_len, args.gen_len)
    from mobilize.core.paths import make_temp_dir
    from mobilize.pipeline.isolate import run_isolated

    logs = make_temp_dir("bench")  # the runtime's own log lines (a bad file's loader errors), off the terminal
    try:
        report = run_isolated(bench_generation, reference, threads or default_threads(), args.prompt_len,
                              args.gen_len, args.iter, args.warmup, what="decoder bench", capture_stderr=True,
                              log_path=logs / "bench.log",
                              crash_hint=CRASH_HINT)
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    for line in lines(report):
        print(line)
    if args.json:
        atomic_write_text(args.json, dumps_measured(report, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0
