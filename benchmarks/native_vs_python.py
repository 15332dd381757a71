"""Native (C++) runner vs the Python harness: MobileNetV2 224 as .pt, .ptl and .pte, 1 and 2 threads.

The three files come from one ``mobilize optimize`` recipe (fuse, TorchScript and lite without
mobile optimization, ExecuTorch with XNNPACK).  Every round visits every format and runs, on the
same seeded input, one native round (a fresh ``bench_torch``/``bench_executorch`` process: load,
warm-up, timed iterations) and one Python round (a fresh Python process: the runtime's Session,
the same warm-up, the harness's timed loop), alternating which goes first.  Both runners start
fresh each round because the C allocator's state depends on the process's history (glibc raises
its trim threshold after large frees): a long-lived Python process that exported a model first
page-faults less per inference than a fresh one, and that is not Python's doing.

Printed per format and thread count: each runner's p50 over every pooled iteration, their ratio,
the difference (what the Python runner adds per call), the median of the per-round ratios, and
minor page faults per iteration for each runner.

    .venv/bin/python benchmarks/native_vs_python.py [--rounds 5] [--iterations 20] [--threads 1,2]
    cpu: Intel(R) Xeon(R) Processor (x86_64, 2 cores; ...)
    threads  format       native p50 ms  python p50 ms  python/native  python-native us  round ratio  faults/iter n/py
          1  torchscript         24.100         24.300          1.008             200.0        1.006    2390 / 2394
    ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from mobilize.bench.harness import BenchConfig
from mobilize.bench.stats import BenchStats
from mobilize.core.backend import default_runtime
from mobilize.native.build import build_binary, runner_for_format
from mobilize.native.runner import run_binary
from mobilize.native.tensorfile import write_tensors
from mobilize.pipeline.recipe import Recipe
from mobilize.core.inputs import InputSpec, make_random_inputs
from mobilize.core.target import host_cpu

SPEC = InputSpec((1, 3, 224, 224))
RECIPE = {"name": "native-vs-python", "passes": ["fuse"], "exports": [
    {"torchscript": {"optimize": "none", "bundled_inputs": False}},
    {"lite": {"optimize": "none", "bundled_inputs": False}},
    "executorch"]}


def export(out: Path) -> dict[str, Path]:
    """The three files, reused from ``out`` when an earlier run left them there."""
    from mobilize.api import optimize

    reuse = {"torchscript": ".pt", "lite": ".ptl", "executorch": ".pte"}
    reuse = {fmt: out / f"mobilenet_v2-{RECIPE['name']}{suffix}" for fmt, suffix in reuse.items()}
    if all(p.is_file() for p in reuse.values()):
        return reuse
    result = optimize("zoo:mobilenet_v2", Recipe.from_dict(RECIPE), out_dir=out, input_specs=[SPEC], verify=False)
    return {a["format"]: Path(a["artifact"]) for a in result["artifacts"]}


def python_worker(fmt: str, path: str, threads: int, warmup: int, iterations: int, inputs: str) -> None:
    """One Python round in this (fresh) process; prints its timings as JSON."""
    import resource

    from mobilize.core.artifact import Artifact, Format
    from mobilize.bench.harness import timed_loop
    from mobilize.native.tensorfile import read_tensors
    from mobilize.runtimes.base import open_session

    with open_session(Artifact.from_file(path), default_runtime(Format(fmt)), threads) as session:
        native = session.prepare(read_tensors(inputs))
        for _ in range(warmup):
            session.run_prepared(native)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        times, total = timed_loop(session.run_prepared, native, iterations)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(json.dumps({"times_ns": times, "loop_ns": total, "minor_faults": faults}))


def python_round(fmt: str, path: Path, threads: int, warmup: int, iterations: int, inputs: Path):
    cmd = [sys.executable, __file__, "--worker", fmt, str(path), str(threads), str(warmup), str(iterations), str(inputs)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["times_ns"], result["loop_ns"], result["minor_faults"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20, help="timed iterations per runner per round")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up runs in each process")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--out", help="folder for the artifacts (default: a temp folder)")
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        fmt, path, threads, warmup, iterations, inputs = args.worker
        python_worker(fmt, path, int(threads), int(warmup), int(iterations), inputs)
        return

    with tempfile.TemporaryDirectory(prefix="native-vs-python-") as tmp:
        tmp_path = Path(tmp)
        files = export(Path(args.out) if args.out else tmp_path / "artifacts")
        runners = {fmt: runner_for_format(_format(fmt)) for fmt in files}
        binaries = {engine.family: build_binary(engine).path for engine in runners.values()}
        write_tensors(tmp_path / "inputs.mbt", make_random_inputs([SPEC], seed=0))
        config = BenchConfig(warmup=args.warmup, iterations=args.iterations)
        print(f"cpu: {host_cpu().describe()}; load average {os.getloadavg()[0]:.1f}")
        print(f"MobileNetV2 224, {args.rounds} interleaved rounds x {args.iterations} iterations per runner, "
              f"each round a fresh process per runner with {args.warmup} warm-up runs")
        print(f"{'threads':>7}  {'format':<12} {'native p50 ms':>13} {'python p50 ms':>13} {'python/native':>13} "
              f"{'python-native us':>16} {'round ratio':>11} {'faults/iter n/py':>16}")
        for threads in (int(t) for t in args.threads.split(",")):
            times: dict[tuple[str, str], list[int]] = {}
            totals: dict[tuple[str, str], int] = {}
            faults: dict[tuple[str, str], int] = {}
            round_ratios: dict[str, list[float]] = {fmt: [] for fmt in files}
            for r in range(args.rounds):
                for fmt in list(files)[r % len(files):] + list(files)[:r % len(files)]:
                    p50 = {}
                    for runner in (("native", "python") if r % 2 == 0 else ("python", "native")):
                        if runner == "native":
                            engine = runners[fmt]
                            extra = list(engine.runtime_args[default_runtime(fmt)])
                            run = run_binary(binaries[engine.family], files[fmt],
                                             ["--input_file", str(tmp_path / "inputs.mbt"), *extra], threads,
                                             config, tmp_path, lambda line: None)
                            t, total, fault = run.times_ns, run.loop_ns, run.loop_minor_faults
                        else:
                            t, total, fault = python_round(fmt, files[fmt], threads, args.warmup, args.iterations,
                                                           tmp_path / "inputs.mbt")
                        key = (fmt, runner)
                        times.setdefault(key, []).extend(t)
                        totals[key] = totals.get(key, 0) + total
                        faults[key] = faults.get(key, 0) + fault
                        p50[runner] = statistics.median(t)
                    round_ratios[fmt].append(p50["python"] / p50["native"])
            for fmt in files:
                native = BenchStats.from_times_ns(times[(fmt, "native")], totals[(fmt, "native")])
                python = BenchStats.from_times_ns(times[(fmt, "python")], totals[(fmt, "python")])
                per_iter = {r: faults[(fmt, r)] / (args.rounds * args.iterations) for r in ("native", "python")}
                print(f"{threads:>7}  {fmt:<12} {native.latency_ms_p50:>13.3f} {python.latency_ms_p50:>13.3f} "
                      f"{python.latency_ms_p50 / native.latency_ms_p50:>13.3f} "
                      f"{(python.latency_ms_p50 - native.latency_ms_p50) * 1e3:>16.1f} "
                      f"{statistics.median(round_ratios[fmt]):>11.3f} "
                      f"{per_iter['native']:>7.0f} / {per_iter['python']:<6.0f}")
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def _format(name: str):
    from mobilize.core.artifact import Format

    return Format(name)


if __name__ == "__main__":
    main()
