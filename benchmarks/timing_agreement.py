"""Does compare's p50 agree with a bare loop over the same artifact?  (target: every ratio within 5%)

Runs `mobilize compare` on a model (default zoo:mobilenet_v2, 2 threads), then, in this one process,
times every OK variant again with nothing around it: the same artifact file (or, for eager variants,
the same prepared module) in a plain `for` loop around `run_prepared`, same threads, same input.
Prints each variant's compare p50, bare p50, their ratio and the CPU; exits 1 if any ratio is off
by more than the tolerance.

    .venv/bin/python benchmarks/timing_agreement.py [--model zoo:mobilenet_v2] [--threads 2] [--tolerance 0.05]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def bare_p50(session, inputs, iterations: int, warmup: int = 10) -> float:
    native = session.prepare(inputs)
    session.checked_run(native, inputs)
    for _ in range(warmup):
        session.run_prepared(native)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter_ns()
        session.run_prepared(native)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="zoo:mobilenet_v2")
    parser.add_argument("--plan", default="default")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iter", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import mobilize
    from mobilize.artifact import Artifact
    from mobilize.build import prepare
    from mobilize.context import Context
    from mobilize.plan import load_plan
    from mobilize.runtimes.base import RuntimeOptions, open_session
    from mobilize.sources.inputs import apply_memory_format
    from mobilize.sources.models import ModelSource, resolve_model
    from mobilize.target import host_cpu

    out = Path(args.output or tempfile.mkdtemp(prefix="timing-agreement-"))
    t0 = time.monotonic()
    report = mobilize.compare(args.model, args.plan, mobilize.CompareConfig(
        threads=args.threads, iterations=args.iter, rounds=args.rounds, out_dir=str(out)),
        progress=lambda done, total, text: print(f"  [{done}/{total}] {text}", file=sys.stderr))
    compare_s = time.monotonic() - t0
    plan = {v.name: v for v in load_plan(args.plan).variants}
    source = resolve_model(args.model)
    spec = source.input_specs[0]
    from mobilize.sources.data import open_data

    x = [open_data(report["data"]).samples(spec, 1)[0]] if report.get("data") else None
    print(f"CPU: {host_cpu().describe()}")
    print(f"compare {args.model} --plan {args.plan}: {compare_s:.0f} s; {args.threads} threads; "
          f"bare loops of {args.iter} iterations after 10 warm-up, same process, one at a time")
    print(f"{'variant':<20} {'compare p50':>12} {'bare p50':>10} {'ratio':>7}  verdict")
    worst = 0.0
    for v in report["variants"]:
        if v["outcome"] != "OK" or not v.get("latency_ms_p50"):
            continue
        variant = plan[v["name"]]
        options = RuntimeOptions(**dict(variant.recipe.runtime.__dict__, threads=args.threads))
        if v.get("artifact"):
            target = Artifact.from_file(v["artifact"])
        else:
            ctx = Context(input_specs=list(source.input_specs))
            target = ModelSource(prepare(resolve_model(args.model).module, variant.recipe, ctx), args.model,
                                 list(ctx.input_specs))
        with open_session(target, variant.runtime, options=options) as session:
            specs = getattr(target, "input_specs", None) or [spec]
            feed = [apply_memory_format(x[0], specs[0])] if x else session.example_inputs()
            bare = bare_p50(session, feed, args.iter)
        ratio = v["latency_ms_p50"] / bare
        worst = max(worst, abs(ratio - 1))
        ok = abs(ratio - 1) <= args.tolerance
        print(f"{v['name']:<20} {v['latency_ms_p50']:>10.2f}ms {bare:>8.2f}ms {ratio:>7.3f}  "
              f"{'within' if ok else 'OUTSIDE'} {args.tolerance:.0%}")
    spreads = [v.get("round_spread_percent") for v in report["variants"] if v.get("round_spread_percent")]
    if spreads:
        print(f"round-median spread in compare: {min(spreads):.0f}-{max(spreads):.0f}%")
    print(f"worst deviation {worst:.1%}: {'PASS' if worst <= args.tolerance else 'FAIL'}")
    print(f"report: {out / 'report.json'}")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
