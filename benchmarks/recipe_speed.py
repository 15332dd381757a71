"""MobileNetV2 (224x224) through the mobile recipe's steps, timed side by side in one run.

Variants: eager fp32, fused, channels-last (fused), TorchScript frozen (fused), int8 x86 and
int8 qnnpack (fused, static, calibrated on the scikit-learn sample photos).  Interleaved
rounds; prints p50/p90 and the ratio of each p50 to eager fp32.

    .venv/bin/python benchmarks/recipe_speed.py [--threads 2] [--rounds 7] [--iter 10]
"""

from __future__ import annotations

import argparse

import torch

from mobilize.bench.rounds import interleaved
from mobilize.backends.torchscript.exporter import TorchScriptConfig, TorchScriptExporter
from mobilize.passes import PASSES
from mobilize.core.context import Context
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec
from mobilize.zoo import ZOO


def step(name: str, module, ctx: Context, **options):
    cls = PASSES.get(name)
    return cls(cls.Config(**options))(module, ctx)


def build_variants() -> dict[str, tuple]:
    spec = InputSpec((1, 3, 224, 224))
    data = open_data("sample-photos:32")
    x = data.samples(spec, 1)[0]
    model = ZOO.get("mobilenet_v2").build()
    ctx = Context(input_specs=[spec], data=data)
    fused = step("fuse", model, ctx)
    cl = step("channels_last", fused, Context(input_specs=[spec]))
    x_cl = x.contiguous(memory_format=torch.channels_last)
    scripted = TorchScriptExporter(TorchScriptConfig(optimize="none", bundled_inputs=False)).script(fused, ctx)
    variants = {"eager fp32": (model, x), "fused": (fused, x), "channels-last": (cl, x_cl),
                "torchscript frozen": (scripted, x)}
    for engine in ("x86", "qnnpack"):
        qctx = Context(input_specs=[spec], data=data)
        q = step("quantize", step("fuse", model, qctx), qctx, engine=engine, calibration_samples=32)
        variants[f"int8 {engine}"] = (q, x)
    return variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iter", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = build_variants()

    def runner(module, engine: str | None):
        def run(x):
            if engine:
                torch.backends.quantized.engine = engine
            with torch.inference_mode():
                return module(x)
        return run

    fns = {name: (runner(m, name.split()[-1] if name.startswith("int8") else None), x)
           for name, (m, x) in variants.items()}
    stats = interleaved(fns, rounds=args.rounds, iterations=args.iter)
    base = stats["eager fp32"].latency_ms_p50
    print(f"MobileNetV2 224x224, {args.threads} thread(s), {args.rounds} interleaved rounds x {args.iter} iterations")
    print(f"{'variant':<20} {'p50 ms':>9} {'p90 ms':>9} {'speedup vs eager':>17}")
    for name, s in sorted(stats.items(), key=lambda kv: kv[1].latency_ms_p50):
        print(f"{name:<20} {s.latency_ms_p50:>9.2f} {s.latency_ms_p90:>9.2f} {base / s.latency_ms_p50:>16.2f}x")


if __name__ == "__main__":
    main()
