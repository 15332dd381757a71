"""The ExecuTorch cliff: MobileNetV2 (224x224) as eager fp32, .pte fp32 and int8 with XNNPACK, and .pte
without a delegate (portable kernels), at 1 and 2 threads, as ratios to eager measured in one run.

Exports the three .pte files with mobilize's executorch exporter from the Conv-BN-folded model
(as the executorch-fp32 recipe does; int8: static PT2E calibrated on the sample photos), then times interleaved rounds (the variant order rotates each round);
each round's median per variant, and the median over rounds, are compared with eager fp32 at
the same thread count.  The no-delegate variant takes seconds per run: it gets few iterations.

    .venv/bin/python benchmarks/executorch_speed.py [--rounds 5] [--iter 20] [--out out/et-speed --reuse]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from mobilize.core.artifact import Artifact
from mobilize.bench.harness import timed_loop
from mobilize.exporters import EXPORTERS
from mobilize.backends.executorch.exporter import ExecuTorchConfig, delegation_report
from mobilize.passes import PASSES
from mobilize.core.context import Context
from mobilize.runtimes.base import open_session
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec
from mobilize.sources.models import resolve_model

SPEC = InputSpec((1, 3, 224, 224))
VARIANTS = {  # name -> executorch exporter options (None: the eager model itself)
    "eager fp32": None,
    ".pte fp32 XNNPACK": {},
    ".pte int8 XNNPACK": {"quantize": "int8"},
    ".pte fp32 no delegate": {"delegate": "none"},
}
SLOW = ".pte fp32 no delegate"


def export_all(model, out: Path, reuse: bool) -> dict[str, Path]:
    paths = {}
    for name, options in VARIANTS.items():
        if options is None:
            continue
        path = out / f"mobilenet_v2-{name.split()[1]}-{'none' if 'no delegate' in name else 'xnnpack'}.pte"
        if not (reuse and path.exists()):
            start = time.perf_counter()
            ctx = Context(input_specs=[SPEC], data=open_data("sample-photos"))
            EXPORTERS.get("executorch")(ExecuTorchConfig(**options)).export(model, ctx, path)
            print(f"exported {path.name} in {time.perf_counter() - start:.0f} s")
        print(f"  {path.name}: {delegation_report(path).summary()}")
        paths[name] = path
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iter", type=int, default=20, help="timed runs per round (fast variants)")
    parser.add_argument("--slow-iter", type=int, default=2, help="timed runs per round without a delegate")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--out", help="keep the .pte files here (default: a temp folder)")
    parser.add_argument("--reuse", action="store_true", help="reuse .pte files already in --out")
    args = parser.parse_args()

    source = resolve_model("zoo:mobilenet_v2")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="et-speed-"))
    out.mkdir(parents=True, exist_ok=True)
    fused = PASSES.get("fuse")()(source.module, Context())  # as the executorch-fp32 recipe; eager stays unfused
    paths = export_all(fused, out, args.reuse)
    x = open_data("sample-photos").samples(SPEC, 1)[0]
    sessions = {"eager fp32": open_session(source)}
    sessions.update({name: open_session(Artifact.from_file(p)) for name, p in paths.items()})
    natives = {name: s.prepare([x]) for name, s in sessions.items()}
    reference = sessions["eager fp32"].run([x])[0]
    for name, s in sessions.items():  # relative: random-weight MobileNetV2 outputs are ~1e-7
        err = float((s.run([x])[0] - reference).abs().max() / reference.abs().max())
        print(f"  {name:<22} max abs diff from eager / max |eager output|: {err:.2g}")
    print(f"load average before timing: {' '.join(f'{v:.2f}' for v in os.getloadavg())} "
          f"(this machine is shared: other jobs take cores, and 2-thread OpenMP suffers most)")

    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        for s in sessions.values():
            s.set_threads(threads)  # eager: torch threads; ExecuTorch: its (shared) threadpool
        per_round: dict[str, list[float]] = {name: [] for name in sessions}
        names = list(sessions)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                n = args.slow_iter if name == SLOW else args.iter
                sessions[name].run_prepared(natives[name])  # warm-up after the thread change / other variants
                times, _ = timed_loop(sessions[name].run_prepared, natives[name], n)
                per_round[name].append(statistics.median(times) / 1e6)
        eager_ms = statistics.median(per_round["eager fp32"])
        for name, values in per_round.items():
            ms = statistics.median(values)
            rows.append((name, threads, ms, ms / eager_ms, eager_ms / ms, len(values)))

    print(f"\nMobileNetV2 224x224, real photo input, {args.rounds} interleaved rounds "
          f"({args.iter} runs each, {args.slow_iter} without a delegate); median ms per run")
    print(f"{'variant':<24}{'threads':>8}{'median ms':>12}{'time / eager':>14}{'speed-up':>10}")
    for name, threads, ms, ratio, speedup, _ in rows:
        print(f"{name:<24}{threads:>8}{ms:>12.2f}{ratio:>14.3f}{speedup:>9.2f}x")
    for threads in sorted({r[1] for r in rows}):
        fast = next(r for r in rows if r[0] == ".pte fp32 XNNPACK" and r[1] == threads)
        slow = next(r for r in rows if r[0] == SLOW and r[1] == threads)
        print(f"{threads} thread(s): no delegate is {slow[2] / fast[2]:.0f}x slower than the XNNPACK .pte")
    print(f"load average after timing: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for s in sessions.values():
        s.close()


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
