"""What compression buys on the trained default model (MobileNetV2 x0.5 on digits, 96x96), in one run:
the variants of the ``compress`` plan, each built with mobilize's build path and run as an ExecuTorch
.pte with XNNPACK.

float; unstructured 50% (same latency: dense kernels multiply the zeros); structured 30% of the MACs,
without and with one epoch of fine-tuning distilled from the float model; PTQ int8; QAT int8; structured
30% + fine-tune + int8.  Pruning, fine-tuning, calibration and QAT use digits:train; top-1 is measured on
all of digits:test.  Latency: interleaved rounds (the order rotates each round), p50 over every timed run,
compared as ratios to float measured in the same run.

    .venv/bin/python benchmarks/compression.py [--threads 1] [--rounds 7] [--iter 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from mobilize.accuracy.metrics import top1
from mobilize.bench.rounds import interleaved
from mobilize.pipeline.build import build
from mobilize.core.context import Context
from mobilize.passes._prune_count import count_macs, count_params, layer_table
from mobilize.plans.plan import load_plan
from mobilize.runtimes.base import open_session
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec
from mobilize.core.target import host_cpu
from mobilize.zoo import ZOO

SPEC = InputSpec((1, 3, 96, 96))
TIE_PERCENT = 15.0
"""Gaps under this between variants are ties on this shared machine (see DESIGN.md)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iter", type=int, default=20, help="timed runs per variant per round")
    parser.add_argument("--out", help="keep the .pte files here (default: a temp folder)")
    parser.add_argument("--variant", action="append", default=[], help="only these variants of the plan")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="compression-"))
    out.mkdir(parents=True, exist_ok=True)

    plan = load_plan("compress")
    if args.variant:
        plan = plan.select(args.variant)
    model = ZOO.get("digits_mobilenet_v2").build()
    example = [torch.zeros(SPEC.shape)]
    float_params, float_macs = count_params(model), count_macs(model, example)
    xs, ys = open_data("digits:test").labelled_sample_lists([SPEC], 100_000)

    rows, sessions = {}, {}
    for variant in plan.variants:
        start = time.perf_counter()
        ctx = Context(input_specs=[SPEC], data=open_data("digits:train"))
        result = build(model, variant.recipe, ctx, out / variant.name)
        artifact = result.artifacts[0].artifact
        prune = ctx.details.get("prune")
        table = layer_table(result.module) if hasattr(result.module, "named_modules") else {}
        zeros, weights = sum(r["zero_weights"] for r in table.values()), sum(r["weights"] for r in table.values())
        session = open_session(artifact, threads=args.threads)
        logits = [session.run(x)[0] for x in xs]
        rows[variant.name] = {
            "params": prune["params_after"] if prune else float_params,
            "macs": prune["macs_after"] if prune else float_macs,
            "sparsity_percent": prune["sparsity_percent"] if prune else (100.0 * zeros / weights if weights else 0.0),
            "size_bytes": artifact.size_bytes, "top1": top1(logits, [[y] for y in ys]),
            "build_s": time.perf_counter() - start, "int8": result.quantized,
        }
        sessions[variant.name] = session
        print(f"built {variant.name:<22} in {rows[variant.name]['build_s']:5.0f} s: {artifact.path.name}, "
              f"top-1 {rows[variant.name]['top1']:.2f}%", flush=True)

    fns = {name: (s.run_prepared, s.prepare(xs[0])) for name, s in sessions.items()}
    stats = interleaved(fns, rounds=args.rounds, iterations=args.iter)
    base = "float" if "float" in stats else next(iter(stats))
    base_ms, base_top1 = stats[base].latency_ms_p50, rows[base]["top1"]

    print()
    print(f"CPU: {host_cpu().describe()}")
    print(f"torch {torch.__version__}, ExecuTorch XNNPACK, {args.threads} thread(s), {args.rounds} interleaved rounds "
          f"x {args.iter} runs; top-1 on all {len(ys)} samples of digits:test; MACs by torch.utils.flop_counter")
    print(f"{'variant':<22} {'params':>9} {'MACs':>11} {'sparsity':>9} {'size KB':>8} {'p50 ms':>8} {'p90 ms':>8} "
          f"{'vs float':>9} {'top-1 %':>8} {'Δ points':>9}")
    for name, row in rows.items():
        s = stats[name]
        print(f"{name:<22} {row['params']:>9,} {row['macs']:>11,} {row['sparsity_percent']:>8.1f}% "
              f"{row['size_bytes'] / 1024:>8.0f} {s.latency_ms_p50:>8.3f} {s.latency_ms_p90:>8.3f} "
              f"{base_ms / s.latency_ms_p50:>8.2f}x {row['top1']:>8.2f} {row['top1'] - base_top1:>+9.2f}")
    print()
    for line in findings(rows, stats, base):
        print(line)


def findings(rows: dict, stats: dict, base: str) -> list[str]:
    """The sentences the issue asks for, from the numbers of this run."""
    lines = []
    speed = {n: stats[base].latency_ms_p50 / s.latency_ms_p50 for n, s in stats.items()}

    def same(ratio: float) -> str:
        gap = abs(ratio - 1) * 100
        return "about the same as float" if gap < TIE_PERCENT else f"{ratio:.2f}x float (a {gap:.0f}% gap)"

    if "unstructured-50" in rows:
        r = rows["unstructured-50"]
        lines.append(f"unstructured-50: {r['sparsity_percent']:.2f}% of the Conv/Linear weights are zero, latency "
                     f"{same(speed['unstructured-50'])}: dense runtimes do not run it faster (XNNPACK multiplies the "
                     f"zeros), and the file is no smaller ({r['size_bytes'] / 1024:.0f} KB).")
    if "structured-30" in rows:
        r = rows["structured-30"]
        cut = 100 * (1 - r["macs"] / rows[base]["macs"])
        lines.append(f"structured-30: {cut:.1f}% fewer MACs, {speed['structured-30']:.2f}x the speed of float "
                     f"(measured in this run); top-1 {r['top1']:.2f}% with BatchNorm re-estimated, no fine-tune.")
    if "structured-30-ft" in rows:
        r = rows["structured-30-ft"]
        drop = rows[base]["top1"] - r["top1"]
        lines.append(f"structured-30-ft: one distilled fine-tuning epoch gives top-1 {r['top1']:.2f}%, "
                     f"{drop:.2f} points below float: {'within' if drop <= 2.0 else 'NOT within'} 2 points; "
                     f"{speed['structured-30-ft']:.2f}x the speed of float.")
    if "ptq-int8" in rows and "qat-int8" in rows:
        p, q = rows["ptq-int8"]["top1"], rows["qat-int8"]["top1"]
        lines.append(f"int8: PTQ {p:.2f}%, QAT {q:.2f}% top-1 - QAT is "
                     f"{'at least as accurate as' if q >= p else 'LESS accurate than'} PTQ; speed "
                     f"{speed['ptq-int8']:.2f}x (PTQ) and {speed['qat-int8']:.2f}x (QAT) float.")
    if "structured-30-ft-int8" in rows:
        r = rows["structured-30-ft-int8"]
        lines.append(f"structured-30-ft-int8: {speed['structured-30-ft-int8']:.2f}x the speed of float, top-1 "
                     f"{r['top1']:.2f}% ({r['top1'] - rows[base]['top1']:+.2f} points).")
    return lines


if __name__ == "__main__":
    main()
