"""Camera input pipeline: one-pass FrameConverter vs the naive chain vs OpenCV, one core.

A 1920x1080 NV21 frame made from a real photo (scikit-learn's china.jpg, upscaled with PIL,
encoded BT.601 full range) becomes a (1, 3, 224, 224) ImageNet-normalised float32 tensor:

  one-pass     mobilize.camera.FrameConverter, centre crop 1080x1080 -> 224x224, into a reused
               buffer (nearest and bilinear)
  naive        numpy float32 YUV->RGB of the whole frame, PIL resize (shorter side 224),
               centre crop, /255, mean/std, HWC->NCHW: the way it is usually written
  opencv       cv2.cvtColor(NV21->RGB), cv2.resize (INTER_NEAREST / INTER_LINEAR), centre
               crop, mean/std, HWC->NCHW (skipped, and said so, when cv2 is not importable).
               cvtColor assumes BT.601 video range, so its colours are off for this
               full-range frame; the work, and so the timing, is the same.

Methods are interleaved: every round times each method over a few frames; the table shows the
median over rounds of ms per frame, and ratios come from the same run.  Exits 0 regardless.

    .venv/bin/python benchmarks/input_pipeline.py            # ~15 s
    .venv/bin/python benchmarks/input_pipeline.py --rounds 3
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from mobilize.camera import IMAGENET_MEAN, IMAGENET_STD, FrameConfig, FrameConverter  # noqa: E402

try:
    import cv2  # noqa: E402

    cv2.setNumThreads(1)
except ImportError:
    cv2 = None

WIDTH, HEIGHT, OUT = 1920, 1080, 224
MEAN = np.array(IMAGENET_MEAN, dtype=np.float32)
STD = np.array(IMAGENET_STD, dtype=np.float32)


def make_frame() -> bytes:
    """china.jpg upscaled to 1920x1080 and encoded to NV21 (BT.601 full range, 2x2 chroma)."""
    from sklearn.datasets import load_sample_images

    images = load_sample_images()
    photo = images.images[[f.endswith("china.jpg") for f in images.filenames].index(True)]
    rgb = np.asarray(Image.fromarray(photo).resize((WIDTH, HEIGHT), Image.BICUBIC), np.float64)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = ((b - y) / 1.772).reshape(HEIGHT // 2, 2, WIDTH // 2, 2).mean(axis=(1, 3)) + 128
    v = ((r - y) / 1.402).reshape(HEIGHT // 2, 2, WIDTH // 2, 2).mean(axis=(1, 3)) + 128
    vu = np.stack([v, u], axis=-1)
    to_u8 = lambda a: np.clip(np.round(a), 0, 255).astype(np.uint8)  # noqa: E731
    return to_u8(y).tobytes() + to_u8(vu).tobytes()


def naive(frame: bytes, resample) -> np.ndarray:
    yuv = np.frombuffer(frame, dtype=np.uint8)
    y = yuv[: WIDTH * HEIGHT].reshape(HEIGHT, WIDTH).astype(np.float32)
    vu = yuv[WIDTH * HEIGHT:].reshape(HEIGHT // 2, WIDTH // 2, 2).astype(np.float32)
    v = vu[..., 0].repeat(2, axis=0).repeat(2, axis=1) - 128
    u = vu[..., 1].repeat(2, axis=0).repeat(2, axis=1) - 128
    rgb = np.stack([y + 1.402 * v, y - 0.344136 * u - 0.714136 * v, y + 1.772 * u], axis=-1)
    rgb = np.clip(rgb, 0, 255).astype(np.uint8)
    new_w = round(WIDTH * OUT / HEIGHT)
    small = np.asarray(Image.fromarray(rgb).resize((new_w, OUT), resample))
    left = (new_w - OUT) // 2
    crop = small[:, left:left + OUT]
    x = (crop / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
    return x.transpose(2, 0, 1)[None].astype(np.float32)


def opencv(frame: bytes, interpolation: int) -> np.ndarray:
    yuv = np.frombuffer(frame, dtype=np.uint8).reshape(HEIGHT * 3 // 2, WIDTH)
    rgb = cv2.cvtColor(yuv, cv2.COLOR_YUV2RGB_NV21)
    new_w = round(WIDTH * OUT / HEIGHT)
    small = cv2.resize(rgb, (new_w, OUT), interpolation=interpolation)
    left = (new_w - OUT) // 2
    crop = small[:, left:left + OUT]
    x = (crop.astype(np.float32) * np.float32(1 / 255) - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def methods(frame: bytes) -> dict[str, object]:
    out: dict[str, object] = {}
    for resize in ("nearest", "bilinear"):
        conv = FrameConverter(FrameConfig(width=WIDTH, height=HEIGHT, layout="nv21",
                                          output_size=(OUT, OUT), resize=resize))
        buf = conv.new_output()
        out[f"one-pass {resize}"] = lambda conv=conv, buf=buf: conv(frame, out=buf)
    rot = FrameConverter(FrameConfig(width=WIDTH, height=HEIGHT, layout="nv21", rotation=90,
                                     output_size=(OUT, OUT), resize="nearest"))
    rot_buf = rot.new_output()
    out["one-pass nearest, rotation 90"] = lambda: rot(frame, out=rot_buf)
    out["naive (PIL nearest)"] = lambda: naive(frame, Image.NEAREST)
    out["naive (PIL bilinear)"] = lambda: naive(frame, Image.BILINEAR)
    if cv2 is not None:
        out["opencv nearest"] = lambda: opencv(frame, cv2.INTER_NEAREST)
        out["opencv bilinear"] = lambda: opencv(frame, cv2.INTER_LINEAR)
    return out


def frames_per_round(fn, target_s: float) -> int:
    fn()  # warm-up
    start = time.perf_counter()
    fn()
    return max(2, min(200, round(target_s / (time.perf_counter() - start))))


def agreement(frame: bytes) -> str:
    """How far one-pass bilinear is from cvtColor -> crop -> cv2.resize(INTER_LINEAR), in 8-bit
    levels.  OpenCV decodes NV21 as BT.601 video range (clamping Y below 16 to 16 first), so
    the converter is set to color_range="video" here; OpenCV also rounds to uint8."""
    if cv2 is None:
        return "opencv not installed"
    conv = FrameConverter(FrameConfig(width=WIDTH, height=HEIGHT, output_size=(OUT, OUT),
                                      resize="bilinear", color_range="video"))
    ours = conv(frame)[0].transpose(1, 2, 0) * STD + MEAN
    yuv = np.frombuffer(frame, dtype=np.uint8).reshape(HEIGHT * 3 // 2, WIDTH)
    rgb = cv2.cvtColor(yuv, cv2.COLOR_YUV2RGB_NV21)
    left = (WIDTH - HEIGHT) // 2
    ref = cv2.resize(rgb[:, left:left + HEIGHT], (OUT, OUT), interpolation=cv2.INTER_LINEAR)
    diff = np.abs(ours * 255 - ref)
    return (f"mean {diff.mean():.3f}, p99 {np.quantile(diff, 0.99):.2f}, max {diff.max():.2f} "
            f"8-bit levels (video range; differences over ~1.3 only where Y<16, which OpenCV clamps)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-ms", type=float, default=40.0,
                        help="time each method runs per round (sets its frames per round)")
    args = parser.parse_args()

    frame = make_frame()
    fns = methods(frame)
    counts = {name: frames_per_round(fn, args.round_ms / 1000) for name, fn in fns.items()}
    per_frame: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            n = counts[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            per_frame[name].append((time.perf_counter() - start) / n * 1000)
    med = {name: statistics.median(times) for name, times in per_frame.items()}

    print(f"1920x1080 NV21 (china.jpg) -> (1, 3, 224, 224) float32, one thread; numpy "
          f"{np.__version__}, opencv {cv2.__version__ if cv2 else 'not installed'}")
    print(f"median of {args.rounds} interleaved rounds\n")
    print(f"{'method':34s} {'ms/frame':>9s} {'min':>7s} {'max':>7s} {'frames/round':>13s}")
    for name in fns:
        t = per_frame[name]
        print(f"{name:34s} {med[name]:9.3f} {min(t):7.3f} {max(t):7.3f} {counts[name]:13d}")
    if cv2 is None:
        print(f"{'opencv':34s} opencv not installed")

    near, bil = med["one-pass nearest"], med["one-pass bilinear"]
    print("\nratios (same run)")
    print(f"  naive nearest / one-pass nearest     {med['naive (PIL nearest)'] / near:7.1f}x")
    print(f"  naive bilinear / one-pass bilinear   {med['naive (PIL bilinear)'] / bil:7.1f}x")
    if cv2 is not None:
        print(f"  opencv nearest / one-pass nearest    {med['opencv nearest'] / near:7.1f}x")
        print(f"  opencv bilinear / one-pass bilinear  {med['opencv bilinear'] / bil:7.1f}x")
    print(f"\none-pass bilinear vs cvtColor+crop+cv2.resize: {agreement(frame)}")

    def verdict(ok: bool | None) -> str:
        return "n/a " if ok is None else ("PASS" if ok else "FAIL")

    opencv_near = None if cv2 is None else near <= med["opencv nearest"]
    opencv_bil = None if cv2 is None else bil <= med["opencv bilinear"]
    print("\ntargets")
    print(f"  {verdict(med['naive (PIL nearest)'] / near >= 3)}  one-pass >= 3x faster than naive"
          f" (nearest: {med['naive (PIL nearest)'] / near:.1f}x)")
    print(f"  {verdict(opencv_near)}  one-pass nearest no slower than opencv nearest"
          + ("  (opencv not installed)" if cv2 is None else ""))
    print(f"  {verdict(opencv_bil)}  one-pass bilinear no slower than opencv bilinear"
          + ("  (opencv not installed)" if cv2 is None else ""))
    print(f"  {verdict(near < 1.0)}  one-pass nearest < 1 ms per frame ({near:.3f} ms)")
    print(f"  info  one-pass bilinear: {bil:.3f} ms per frame")


if __name__ == "__main__":
    main()
