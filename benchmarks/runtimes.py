"""The four maintained edge runtimes side by side: MobileNetV2 224, fp32 and int8 of ExecuTorch, LiteRT,
ONNX Runtime and OpenVINO, 1 and 2 threads, one interleaved run; and mobilize's timing of the OpenVINO
IR next to OpenVINO's own ``benchmark_app`` on the same files, threads, latency hint and one stream.

The eight files come from the ``runtimes`` plan's recipes (int8 calibrated on the sample photos),
built from the zoo MobileNetV2 with BatchNorm statistics re-estimated on those photos (random
init gives ~1e-9 logits).  Each is checked against the float model by the verify core first.
Timing: interleaved rounds (the order rotates each round), each variant's median per round, the
median over rounds; ratios to ExecuTorch fp32 at the same thread count.  Then, per thread count
and IR, ``benchmark_app -hint latency -api sync`` with one stream, T threads and the IR's inference
precision (set through ``-load_config``: its command line refuses -nstreams/-nthreads beside a hint)
alternates with mobilize's own loop on the same IR (``--vendor-rounds`` times each); printed: the
ratio of the medians over rounds, and of the best rounds (on a shared machine whose load comes in
bursts, the best round is the least disturbed one).

    .venv/bin/python benchmarks/runtimes.py [--rounds 5] [--iter 20] [--threads 1,2] [--out out/runtimes --reuse]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from mobilize.core.artifact import Artifact
from mobilize.bench.harness import timed_loop
from mobilize.pipeline.build import Built, build, verify_artifact
from mobilize.core.context import Context
from mobilize.plans.plan import load_plan
from mobilize.runtimes.base import open_session
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec
from mobilize.core.target import host_cpu
from mobilize.zoo import ZOO

SPEC = InputSpec((1, 3, 224, 224))
BASELINE = "executorch-fp32"
_MEDIAN = re.compile(r"Median:\s+([\d.]+) ms")


def mobilenet_v2() -> torch.nn.Module:
    """The zoo model with BatchNorm statistics estimated on real photos (as benchmarks/onnx_speed.py)."""
    model = ZOO.get("mobilenet_v2").build()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        for x, _ in open_data("sample-photos").batches(SPEC, limit=32, batch_size=8):
            model(x)
    return model.eval()


def build_all(model: torch.nn.Module, out: Path, reuse: bool) -> dict[str, Built]:
    built = {}
    for variant in load_plan("runtimes").variants:
        stem = out / f"mobilenet_v2-{variant.name}"
        ctx = Context(input_specs=[SPEC], data=open_data("sample-photos"))
        existing = [p for p in out.glob(f"mobilenet_v2-{variant.name}.*") if not p.name.endswith((".json", ".bin"))]
        start = time.perf_counter()
        if reuse and existing:
            art = Artifact.from_file(existing[0])
            kind = "quantized" if "int8" in variant.name else "float"
            built[variant.name] = Built(art, kind, 0.0)
        else:
            [built[variant.name]] = build(model, variant.recipe, ctx, stem).artifacts
        verdict = verify_artifact(built[variant.name], model, ctx)
        print(f"  {variant.name:<16} {built[variant.name].artifact.path.name:<36} "
              f"{built[variant.name].artifact.size_bytes / 1e6:6.2f} MB  {time.perf_counter() - start:5.0f} s  "
              f"{verdict.outcome}: {verdict.reason}", flush=True)
    return built


def benchmark_app(xml: Path, threads: int, precision: str, seconds: int) -> float:
    """OpenVINO's own tool on the same IR: latency hint, one stream, the same threads and precision.  Its
    command line refuses -nstreams/-nthreads beside -hint latency, so they go in through -load_config."""
    import json

    exe = Path(sys.executable).with_name("benchmark_app")
    config = {"CPU": {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": str(threads),
                      "INFERENCE_PRECISION_HINT": precision}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(config, fh)
    try:
        cmd = [str(exe), "-m", str(xml), "-d", "CPU", "-hint", "latency", "-load_config", fh.name, "-api", "sync",
               "-t", str(seconds)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 120)
    finally:
        os.unlink(fh.name)
    match = _MEDIAN.search(proc.stdout)
    if proc.returncode != 0 or not match:
        raise RuntimeError(f"benchmark_app failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-800:]}")
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iter", type=int, default=20, help="timed runs per variant per round")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--vendor-rounds", type=int, default=3, help="benchmark_app / mobilize alternations per IR")
    parser.add_argument("--vendor-seconds", type=int, default=5, help="benchmark_app -t (mobilize times as long)")
    parser.add_argument("--out", help="keep the files here (default: a temp folder)")
    parser.add_argument("--reuse", action="store_true", help="reuse files already in --out")
    args = parser.parse_args()

    print(f"CPU: {host_cpu().describe()}; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="runtimes-"))
    out.mkdir(parents=True, exist_ok=True)
    model = mobilenet_v2()
    print("building the runtimes plan's eight files (verify core against the float model):")
    built = build_all(model, out, args.reuse)
    x = open_data("sample-photos").samples(SPEC, 1)[0]
    sessions = {name: open_session(b.artifact, threads=1) for name, b in built.items()}
    natives = {name: s.prepare([x]) for name, s in sessions.items()}
    for name, s in sessions.items():
        details = s.details()
        ran = details.get("ran_in") or details.get("precision") or (
            f"XNNPACK {details['delegation'].get('delegated_percent')}% of ops" if "delegation" in details else "")
        print(f"  {name:<16} runs in: {ran}")

    rows = []
    thread_counts = [int(t) for t in args.threads.split(",")]
    for threads in thread_counts:
        for s in sessions.values():
            s.set_threads(threads)
        names = list(sessions)
        per_round: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                time.sleep(0.05)  # idle thread pools of the previous runtime spin for a few ms
                sessions[name].run_prepared(natives[name])
                times, _ = timed_loop(sessions[name].run_prepared, natives[name], args.iter)
                per_round[name].append(statistics.median(times) / 1e6)
        base = statistics.median(per_round[BASELINE])
        for name in names:
            ms = statistics.median(per_round[name])
            rows.append((name, threads, ms, ms / base, min(per_round[name]), max(per_round[name])))

    print(f"\nMobileNetV2 224x224, real photo input, {args.rounds} interleaved rounds of {args.iter} runs; "
          f"median over rounds of each round's median")
    print(f"{'variant':<18}{'threads':>8}{'median ms':>11}{'vs ' + BASELINE:>22}{'round min..max ms':>20}")
    for name, threads, ms, ratio, lo, hi in rows:
        print(f"{name:<18}{threads:>8}{ms:>11.2f}{ratio:>22.2f}{lo:>12.2f}..{hi:<7.2f}")

    print("\nmobilize bench vs OpenVINO benchmark_app on the same IR (latency hint, 1 stream, same threads, "
          f"-api sync, -infer_precision as the IR says); {args.vendor_rounds} alternations, medians of medians")
    print(f"{'IR':<18}{'threads':>8}{'mobilize p50 ms':>17}{'benchmark_app median ms':>25}{'ratio':>8}"
          f"{'best rounds ms':>17}{'ratio':>8}")
    for name in ("openvino-fp32", "openvino-int8"):
        session, native = sessions[name], natives[name]
        precision = session.precision
        for threads in thread_counts:
            session.set_threads(threads)
            ours, theirs = [], []
            for _ in range(args.vendor_rounds):
                start, times = time.perf_counter(), []
                while time.perf_counter() - start < args.vendor_seconds:
                    times += timed_loop(session.run_prepared, native, 20)[0]
                ours.append(statistics.median(times) / 1e6)
                theirs.append(benchmark_app(built[name].artifact.path, threads, precision, args.vendor_seconds))
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"{name:<18}{threads:>8}{a:>17.3f}{b:>25.3f}{a / b:>8.3f}"
                  f"{min(ours):>8.3f} /{min(theirs):>7.3f}{min(ours) / min(theirs):>8.3f}", flush=True)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for s in sessions.values():
        s.close()


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
