"""``mobilize tune``'s pick next to plain fp32 and plain int8 of every runtime, with the search's wall time.

For each model: tune (the budget: 0.5 top-1 points on labelled digits, or cosine 0.99 on the
sample photos for the random-init MobileNetV2), then every candidate tune built, within budget or
not, timed together in interleaved rounds (one thread), and the "why is int8 not faster" diagnosis
for one ONNX int8 variant that is not faster than ONNX fp32.

    .venv/bin/python benchmarks/tune.py [--models zoo:digits_mobilenet_v2,zoo:mobilenet_v2]
                                        [--runtimes onnxruntime,executorch] [--rounds 7]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from mobilize.accuracy.verify import Policy
from mobilize.core.paths import model_stem
from mobilize.plans.facts import calibration_for, default_data
from mobilize.sources.models import resolve_model
from mobilize.tune import tune
from mobilize.tune.timing import time_candidates as _time
from mobilize.tune.why import why_not_faster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="zoo:digits_mobilenet_v2,zoo:mobilenet_v2")
    ap.add_argument("--runtimes", default="onnxruntime,executorch")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--time-budget", type=float, default=600.0, help="seconds of search per model")
    args = ap.parse_args()
    from mobilize.core.target import host_cpu

    print(f"CPU: {host_cpu().describe()}", flush=True)
    for ref in args.models.split(","):
        source = resolve_model(ref)
        data = default_data(ref, source.input_specs)
        policy = Policy(max_drop_points=0.5) if data and data.startswith("digits") else Policy(min_cosine=0.99)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            result = tune(source.module, source.input_specs, data=data, calibration=calibration_for(data)[0],
                          policy=policy, runtimes=args.runtimes.split(","), out_dir=Path(tmp), stem=model_stem(ref),
                          eval_samples=args.samples, rounds=args.rounds, iterations=args.iterations,
                          time_budget_s=args.time_budget, echo=lambda t: print("    " + t, flush=True))
            wall = time.perf_counter() - t0
            built = [c for c in result.candidates if c.path is not None]
            sample = _first(data, source.input_specs)
            _time(built, sample, args.rounds, args.iterations, lambda _t: None)
            print(f"\n{ref}: data {data}, budget {_budget(policy, data)}; search wall time {wall:.1f} s, "
                  f"winner {result.winner.name if result.winner else 'none'}"
                  + (f" (tie with {', '.join(result.tie_with)})" if result.tie_with else ""))
            fp32 = {c.runtime: c for c in built if c.name.endswith("fp32")}
            print(f"  {'candidate':<30} {'verdict':<12} {'top-1 drop':>10} {'cosine':>8} {'p50 ms':>8} {'vs fp32':>8}")
            for c in built:
                base = fp32.get(c.runtime)
                ratio = base.latency_ms_p50 / c.latency_ms_p50 if base and c.latency_ms_p50 else float("nan")
                drop = f"{c.drop_points:+.2f}" if c.drop_points is not None else "-"
                mark = "  <- tune" if c is result.winner else ""
                print(f"  {c.name:<30} {c.verdict.outcome:<12} {drop:>10} {c.cosine or 0:>8.4f} "
                      f"{c.latency_ms_p50 or float('nan'):>8.3f} {ratio:>7.2f}x{mark}")
            for runtime, base in fp32.items():  # "why is int8 not faster", per runtime
                int8 = [c for c in built if c.runtime == runtime and c.kind == "quantized" and c.latency_ms_p50
                        and base.latency_ms_p50]
                if not int8:
                    continue
                worst = max(int8, key=lambda c: c.latency_ms_p50)
                gain = base.latency_ms_p50 / worst.latency_ms_p50
                head = (f"{worst.name} is not faster than {base.name} ({gain:.2f}x)" if gain <= 1 else
                        f"every {runtime} int8 candidate is faster than {base.name} here; the least gain, "
                        f"{worst.name} ({gain:.2f}x), for where the time goes")
                print(f"\n  {head}:")
                print("\n".join("  " + ln for ln in why_not_faster(base.path, worst.path, sample).lines()))


def _first(data, specs):
    from mobilize.sources.data import open_data

    return open_data(data).sample_lists(specs, 1)[0]


def _budget(policy: Policy, data: str) -> str:
    return f"{policy.max_drop_points:g} top-1 points" if data.startswith("digits") else f"cosine {policy.min_cosine:g}"


if __name__ == "__main__":
    main()
