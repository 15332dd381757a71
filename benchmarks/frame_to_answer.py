"""Frame to answer: one 1920x1080 NV21 frame -> the default model -> top-1, Python vs native (C++).

The frame holds a real held-out digit (``digits:test`` sample 0, upscaled into the centre of the
frame, encoded BT.601 full range), so the answer can be checked: both paths must name that digit.
The model is the default model's executorch-int8 file (the `tune` pick; exported once into
``out/frame_to_answer/`` unless ``--model`` names a .pte).  Configurations: runner (python =
``bench --frames``, the numpy converter and the ExecuTorch Python runtime; native =
``bench --native --frames``, ``camera_convert.h`` and the C++ runtime) x resize (nearest, bilinear)
x threads (1, 2).  Rounds interleave every configuration; the table shows the median over rounds of
each stage's p50 and the frame-to-answer p50, and each stage's share of the frame (mean-based).

    .venv/bin/python benchmarks/frame_to_answer.py [--rounds 3] [--iterations 200] [--model FILE.pte]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from mobilize.bench.harness import BenchConfig  # noqa: E402
from mobilize.camera import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from mobilize.camera.bench import bench_frames  # noqa: E402
from mobilize.camera.encode import encode_frame  # noqa: E402
from mobilize.camera.frames import parse_frame_spec  # noqa: E402
from mobilize.native.frames import bench_native_frames  # noqa: E402
from mobilize.sources.data import open_data  # noqa: E402
from mobilize.core.inputs import InputSpec  # noqa: E402

SPEC = "nv21:1920x1080"
OUT = Path("out/frame_to_answer")


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def make_frame(path: Path) -> int:
    """The held-out digit in the middle of a 1080p NV21 frame; returns its label."""
    x, y = next(iter(open_data("digits:test").batches(InputSpec((1, 3, 96, 96)), limit=1)))
    rgb = x[0].permute(1, 2, 0).numpy() * np.array(IMAGENET_STD) + np.array(IMAGENET_MEAN)
    digit = Image.fromarray(np.clip(np.round(rgb * 255), 0, 255).astype(np.uint8)).resize((1080, 1080), Image.BICUBIC)
    frame = np.zeros((1080, 1920, 3), np.uint8)
    frame[:, 420:1500] = np.asarray(digit)
    path.write_bytes(encode_frame(frame, "nv21"))
    return int(y[0])


def default_model() -> str:
    found = sorted(OUT.glob("*executorch-int8.pte"))
    if not found:
        subprocess.run([sys.executable, "-m", "mobilize", "optimize", "zoo:digits_mobilenet_v2", "--recipe",
                        "executorch-int8", "--data", "digits", "-o", str(OUT)], check=True)
        found = sorted(OUT.glob("*executorch-int8.pte"))
    return str(found[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--model", help="a .pte of the default model (default: its executorch-int8 file)")
    args = parser.parse_args()
    model = args.model or default_model()
    spec = parse_frame_spec(SPEC)
    load_before = os.getloadavg()
    quiet = lambda line: None  # noqa: E731
    configs = [(runner, resize, threads) for runner in ("python", "native") for resize in ("nearest", "bilinear")
               for threads in (1, 2)]
    results: dict[tuple, list[dict]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        frame = Path(tmp) / "frame.nv21"
        label = make_frame(frame)
        for r in range(args.rounds):
            for c in configs if r % 2 == 0 else configs[::-1]:
                runner, resize, threads = c
                fn = bench_frames if runner == "python" else bench_native_frames
                config = BenchConfig(warmup=20, iterations=args.iterations, threads=threads)
                results[c].append(fn(model, config, spec=spec, source=str(frame), resize=resize, echo=quiet))
    load_after = os.getloadavg()

    print(f"cpu: {cpu_name()} ({platform.machine()}, {os.cpu_count()} cores); load average "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(f"model: {model}\nframe: {SPEC} NV21 holding held-out digit {label} -> (1,3,96,96) float32; "
          f"{args.rounds} interleaved rounds x {args.iterations} frames, medians over rounds\n")
    print(f"{'runner':7s} {'resize':9s} {'thr':>3s} {'top-1':>5s}  {'frame p50 ms':>12s}  "
          f"{'convert':>15s}  {'feed':>15s}  {'infer':>15s}  {'answer':>15s}")
    p50 = {}
    for c in configs:
        runs = results[c]
        p50[c] = statistics.median(r["latency_ms_p50"] for r in runs)
        tops = {r["frames"]["first_frame_top_k"][0][0] for r in runs}
        cells = []
        for stage in ("convert", "feed", "infer", "answer"):
            if stage not in runs[0]["frames"]["stages"]:
                cells.append(f"{'-':>15s}")
                continue
            ms = statistics.median(r["frames"]["stages"][stage]["latency_ms_p50"] for r in runs)
            share = statistics.median(r["frames"]["stages"][stage]["share_pct"] for r in runs)
            cells.append(f"{ms:7.3f} ({share:4.1f}%)")
        print(f"{c[0]:7s} {c[1]:9s} {c[2]:3d} {','.join(map(str, sorted(tops))):>5s}  {p50[c]:12.3f}  "
              + "  ".join(cells))
    print("\nratios (same run, frame-to-answer p50)")
    for resize in ("nearest", "bilinear"):
        for threads in (1, 2):
            print(f"  python / native, {resize:8s} {threads} thread(s): "
                  f"{p50[('python', resize, threads)] / p50[('native', resize, threads)]:.2f}x")
    for runner in ("python", "native"):
        print(f"  {runner}: bilinear / nearest, 2 threads: "
              f"{p50[(runner, 'bilinear', 2)] / p50[(runner, 'nearest', 2)]:.2f}x")
    tops = {r["frames"]["first_frame_top_k"][0][0] for runs in results.values() for r in runs}
    best = min(p50.values())
    print("\ntargets")
    print(f"  {'PASS' if tops == {label} else 'FAIL'}  every configuration answers {label} (got {sorted(tops)})")
    print(f"  {'PASS' if best <= 1.5 else 'FAIL'}  <= 1.5 ms frame to answer on 2 cores (best p50 {best:.3f} ms, "
          f"{min(p50, key=p50.get)})")


if __name__ == "__main__":
    main()
