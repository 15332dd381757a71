"""The C++ converter (``native/cpp/camera_convert.h``) against the Python one on the same frames:
bit-exact for nearest, within one LSB for bilinear, over layouts, sizes, strides, rotations, crops,
output layouts and dtypes.  A tiny driver is compiled with g++ -O3 as CMake Release builds do (~5 s); no g++, the test says so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mobilize.camera import FrameConfig, FrameConverter
from mobilize.camera.encode import encode_frame, moving_pattern
from mobilize.camera.frames import native_config

CPP = Path(__file__).resolve().parents[2] / "src" / "mobilize" / "native" / "cpp"

# (width, height, layout, row_stride, chroma_row_stride, rotation, out (h, w), resize, extra FrameConfig fields)
CASES = [
    (1920, 1080, "nv21", None, None, 90, (96, 96), "nearest", {}),
    (1920, 1080, "nv21", None, None, 90, (96, 96), "bilinear", {}),
    (640, 480, "nv21", 672, None, 0, (224, 224), "nearest", {}),
    (640, 480, "nv21", 672, None, 270, (224, 224), "bilinear", {}),
    (640, 480, "nv12", None, None, 180, (100, 60), "nearest", {}),
    (640, 480, "nv12", 704, 704, 90, (100, 60), "bilinear", {}),
    (320, 240, "i420", None, None, 0, (224, 224), "nearest", {"output_layout": "nhwc"}),
    (320, 240, "i420", 336, 176, 270, (224, 224), "bilinear", {"output_layout": "nhwc"}),
    (322, 242, "i420", 330, 170, 180, (33, 47), "nearest", {"color_range": "video"}),
    (322, 242, "nv21", None, None, 90, (33, 47), "bilinear", {"color_range": "video"}),
    (176, 144, "nv21", 192, None, 0, (64, 64), "nearest", {"output_dtype": "uint8"}),
    (176, 144, "nv21", 192, None, 90, (64, 64), "bilinear", {"output_dtype": "uint8", "output_layout": "nhwc"}),
    (176, 144, "nv12", None, None, 270, (50, 70), "nearest", {"channel_order": "bgr"}),
    (176, 144, "nv12", None, None, 0, (50, 70), "bilinear", {"channel_order": "bgr", "crop": "none"}),
    (200, 120, "rgb", None, None, 0, (96, 96), "nearest", {}),
    (200, 120, "rgb", 640, None, 90, (96, 96), "bilinear", {}),
    (200, 120, "bgr", None, None, 180, (32, 48), "nearest", {"output_layout": "nhwc"}),
    (200, 120, "bgr", 608, None, 270, (32, 48), "bilinear", {"output_dtype": "uint8"}),
    (1280, 720, "nv21", None, None, 0, (224, 224), "nearest", {"crop_size": (600, 500)}),
    (1280, 720, "nv21", 1344, 1344, 180, (224, 224), "bilinear", {"crop_size": (600, 500)}),
    (96, 96, "nv21", None, None, 0, (96, 96), "nearest", {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.25, 0.125)}),
    (96, 96, "nv21", None, None, 90, (96, 96), "bilinear", {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.25, 0.125)}),
    (2, 2, "nv21", None, None, 0, (1, 1), "nearest", {}),
    (30, 20, "i420", 40, 24, 90, (7, 5), "bilinear", {"crop": "none", "output_dtype": "uint8"}),
]


def _frame(cfg: FrameConfig, i: int, rng) -> bytes:
    """Even cases: a photo-like pattern encoded as the layout; odd: random bytes (every value, clipping)."""
    if i % 2:
        size = cfg.frame_nbytes - (cfg.last_row_padding if i % 4 == 1 else 0)  # some drop the last padding
        return rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    return encode_frame(moving_pattern(cfg.height, cfg.width, i), cfg.layout, row_stride=cfg.stride,
                        chroma_row_stride=cfg.chroma_stride or None, color_range=cfg.color_range)


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed: the C++ converter cannot be compiled here")
    out = tmp_path_factory.mktemp("driver") / "camera_driver"
    subprocess.run([gxx, "-std=c++17", "-O3", "-ffp-contract=off", "-I", str(CPP),
                    str(Path(__file__).with_name("camera_driver.cpp")), "-o", str(out)], check=True)
    return out


def test_cpp_converter_matches_python(driver, tmp_path):
    assert len(CASES) >= 20
    rng = np.random.default_rng(0)
    lines, expected = [], []
    for i, (w, h, layout, stride, cstride, rotation, out, resize, extra) in enumerate(CASES):
        cfg = FrameConfig(width=w, height=h, layout=layout, row_stride=stride, chroma_row_stride=cstride,
                          rotation=rotation, output_size=out, resize=resize, **extra)
        frame = _frame(cfg, i, rng)
        (tmp_path / f"{i}.frame").write_bytes(frame)
        lines.append(f"{tmp_path / f'{i}.frame'}\t{tmp_path / f'{i}.out'}\t{native_config(cfg)}")
        expected.append((cfg, FrameConverter(cfg)(frame)))
    (tmp_path / "cases").write_text("\n".join(lines) + "\n")
    subprocess.run([str(driver), str(tmp_path / "cases")], check=True)
    for i, (cfg, want) in enumerate(expected):
        got = np.fromfile(tmp_path / f"{i}.out", dtype=want.dtype).reshape(want.shape)
        if cfg.resize == "nearest":
            assert np.array_equal(got, want), f"case {i} {CASES[i]}: nearest differs from Python"
            continue
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        if cfg.output_dtype == "uint8":
            lsb = np.ones(3)
        else:  # one 0..255 pixel step in each channel's normalised units
            lsb = 1.0 / (255.0 * np.array(cfg.std))
            lsb = lsb[::-1] if cfg.channel_order == "bgr" else lsb
        axis = 1 if cfg.output_layout == "nchw" else 3
        per_channel = np.moveaxis(diff, axis, 0).reshape(3, -1).max(axis=1)
        assert (per_channel <= lsb).all(), f"case {i} {CASES[i]}: bilinear differs by {per_channel} > {lsb}"


def test_native_config_round_trips_every_field():
    cfg = FrameConfig(width=640, height=480, layout="i420", row_stride=648, chroma_row_stride=328, rotation=270,
                      crop_size=(400, 300), output_size=(96, 64), resize="bilinear", color_range="video",
                      mean=(0.1, 0.2, 0.3), std=(0.4, 0.5, 0.6), channel_order="bgr", output_layout="nhwc",
                      output_dtype="uint8")
    line = native_config(cfg)
    for key in ("row_stride=648", "chroma_row_stride=328", "rotation=270", "crop_h=400", "crop_w=300", "out_h=96",
                "out_w=64", "resize=bilinear", "color_range=video", "mean=0.1,0.2,0.3", "std=0.4,0.5,0.6",
                "channel_order=bgr", "output_layout=nhwc", "output_dtype=uint8", "layout=i420"):
        assert key in line.split(), key
