"""ONNX Runtime on MobileNetV2 (zoo, 224x224): fp32 vs static int8 QDQ vs dynamic int8, 1 and 2 threads.

All three artifacts come from mobilize's ``onnx`` exporter (static int8 calibrated on the
sample photos).  Each session runs twice per round — plain ``run`` (outputs allocated per run)
and IO binding (inputs bound once, outputs written into preallocated buffers) — and the
rounds interleave every case, reversing the order each round.  Printed: the median over
rounds of each case's median latency, and the median over rounds of each ratio.

    .venv/bin/python benchmarks/onnx_speed.py [--rounds 15] [--iterations 20]
    variant        threads  plain ms  vs fp32  iobind ms  iobind/plain
    fp32                 2     7.812    1.00x      7.790         0.997
    static int8          2     6.215    1.26x      6.190         0.996
    ...
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from mobilize.core.artifact import Artifact
from mobilize.bench.harness import timed_loop
from mobilize.exporters import EXPORTERS
from mobilize.core.context import Context
from mobilize.runtimes.base import open_session
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec
from mobilize.zoo import ZOO

SPEC = InputSpec((1, 3, 224, 224))
VARIANTS = {"fp32": {}, "static int8": {"quantize": "static", "calibration_samples": 32},
            "dynamic int8": {"quantize": "dynamic"}}


def mobilenet_v2() -> torch.nn.Module:
    """The zoo model with BatchNorm statistics estimated on real photos (random init gives ~1e-9 logits)."""
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


def build_artifacts(out: Path) -> dict[str, Path]:
    exporter = EXPORTERS.get("onnx")
    data = open_data("sample-photos")
    fp32 = exporter().export(mobilenet_v2(), Context(input_specs=[SPEC]), out / "fp32").path
    paths = {"fp32": fp32}
    for name, options in VARIANTS.items():
        if options:  # ONNX → ONNX from the fp32 file, as `mobilize optimize model.onnx` does
            ctx = Context(input_specs=[SPEC], data=data)
            art = exporter(exporter.Config(**options)).export(Artifact.from_file(fp32), ctx, out / name.replace(" ", "-"))
            paths[name] = art.path
    return paths


def median_ms(session, native, iterations: int) -> float:
    times, _ = timed_loop(session.run_prepared, native, iterations)
    return statistics.median(times) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    x = next(iter(open_data("sample-photos").batches(SPEC, limit=1)))[0]
    with tempfile.TemporaryDirectory(prefix="onnx-speed-") as tmp:
        paths = build_artifacts(Path(tmp))
        cases = {}
        for t in threads:
            for name, path in paths.items():
                session = open_session(Artifact.from_file(path), threads=t)
                plain = session.prepare([x])
                session.use_io_binding(True)
                bound = session.prepare([x])
                for native in (plain, bound):
                    for _ in range(5):
                        session.run_prepared(native)
                cases[(name, t)] = (session, plain, bound, path.stat().st_size)
        samples = {(key, mode): [] for key in cases for mode in ("plain", "bound")}
        order = list(cases)
        for r in range(args.rounds):
            for key in order if r % 2 == 0 else reversed(order):
                session, plain, bound, _ = cases[key]
                modes = [("plain", plain), ("bound", bound)]
                for mode, native in modes if r % 2 == 0 else modes[::-1]:
                    samples[(key, mode)].append(median_ms(session, native, args.iterations))
        print(f"MobileNetV2 {SPEC.shape[2]}x{SPEC.shape[3]} (zoo), ONNX Runtime, {args.rounds} interleaved rounds x "
              f"{args.iterations} iterations; medians over rounds")
        print(f"{'variant':<14} {'threads':>7} {'size MB':>8} {'plain ms':>9} {'vs fp32':>8} {'iobind ms':>10} "
              f"{'iobind/plain':>13}")
        for t in threads:
            for name in paths:
                key = (name, t)
                plain, bound = samples[(key, "plain")], samples[(key, "bound")]
                speedup = statistics.median(f / p for f, p in zip(samples[(("fp32", t), "plain")], plain))
                binding = statistics.median(b / p for b, p in zip(bound, plain))
                print(f"{name:<14} {t:>7} {cases[key][3] / 1e6:>8.2f} {statistics.median(plain):>9.3f} "
                      f"{speedup:>7.2f}x {statistics.median(bound):>10.3f} {binding:>13.3f}")
        for session, *_ in cases.values():
            session.close()
    print("vs fp32 = median over rounds of (fp32 ms / variant ms) at the same thread count (>1: faster than fp32)")
    print("iobind/plain = median over rounds of (IO-binding ms / plain run ms) on the same session (<1: binding faster)")


if __name__ == "__main__":
    main()
