"""Reused input/output buffers vs allocating per call, per runtime, in one run.

For the default model (MobileNetV2 x0.5, 96x96): ONNX Runtime plain `run` vs IO binding;
ExecuTorch and eager torch with a fresh input tensor and copied-out outputs per call (`run`)
vs an input prepared once and outputs left in place (`run_prepared`, ExecuTorch with
``reuse_outputs``) on the same loaded program.  Interleaved rounds; medians; ratios.

    .venv/bin/python benchmarks/buffer_reuse.py [--threads 2] [--rounds 7] [--iter 200]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from mobilize.bench.rounds import interleaved
from mobilize.exporters import EXPORTERS
from mobilize.core.context import Context
from mobilize.runtimes.base import RuntimeOptions, open_session
from mobilize.sources.data import open_data
from mobilize.sources.models import resolve_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iter", type=int, default=200)
    args = parser.parse_args()
    source = resolve_model("zoo:digits_mobilenet_v2")
    spec = source.input_specs[0]
    x = open_data("digits:test").samples(spec, 1)[0]
    out = Path(tempfile.mkdtemp(prefix="buffer-reuse-"))
    arts = {}
    for name in ("executorch", "onnx"):
        exporter = EXPORTERS.get(name)()
        arts[name] = exporter.export(source.module, Context(input_specs=[spec]), out / "model")
    # One program instance per runtime where the runtime allows both modes on it, so the
    # comparison is of the buffers, not of two loaded copies of the program.
    et = open_session(arts["executorch"], options=RuntimeOptions(threads=args.threads, extra={"reuse_outputs": True}))
    eager = open_session(source, threads=args.threads)
    sessions = {
        "onnxruntime plain": open_session(arts["onnx"], threads=args.threads),
        "onnxruntime io-binding": open_session(arts["onnx"], options=RuntimeOptions(threads=args.threads, extra={"io_binding": True})),
        "executorch copy-out": et,
        "executorch reuse-out": et,
        "eager convert-per-call": eager,
        "eager prepared-once": eager,
    }
    frame = x.numpy().copy()  # what a camera pipeline hands over: a numpy buffer

    def per_call(session):
        return lambda _: session.run([torch.from_numpy(frame.copy())])

    variants = {}
    for name, s in sessions.items():
        if name.endswith(("plain", "copy-out", "convert-per-call")):
            variants[name] = (per_call(s), None)
        else:
            variants[name] = (s.run_prepared, s.prepare([x]))
    stats = interleaved(variants, rounds=args.rounds, iterations=args.iter // args.rounds)
    print(f"default model (MobileNetV2 x0.5, 96x96), {args.threads} thread(s), {args.rounds} interleaved rounds")
    print(f"{'variant':<26} {'p50 us':>9} {'p90 us':>9}")
    for name, s in stats.items():
        print(f"{name:<26} {s.latency_ms_p50 * 1e3:>9.1f} {s.latency_ms_p90 * 1e3:>9.1f}")
    for runtime, (alloc, reuse) in {"onnxruntime": ("onnxruntime plain", "onnxruntime io-binding"),
                                    "executorch": ("executorch copy-out", "executorch reuse-out"),
                                    "eager": ("eager convert-per-call", "eager prepared-once")}.items():
        ratio = stats[alloc].latency_ms_p50 / stats[reuse].latency_ms_p50
        print(f"{runtime:<12} allocating / reused p50: {ratio:.3f}")
    for s in set(sessions.values()):
        s.close()


if __name__ == "__main__":
    main()
