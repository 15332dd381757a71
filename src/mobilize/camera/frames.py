"""What ``--frames`` means: the frame spec string, the frames themselves (a folder or file of raw
frames, or a synthetic moving pattern), and the `FrameConfig` that turns them into a model's input.

    >>> from mobilize.camera.frames import parse_frame_spec, frame_config_for
    >>> from mobilize.core.inputs import InputSpec, MemoryFormat
    >>> spec = parse_frame_spec("nv21:1920x1080:90")
    >>> spec
    FrameSpec(layout='nv21', width=1920, height=1080, rotation=90)
    >>> cfg = frame_config_for(spec, InputSpec((1, 3, 96, 96), "float", MemoryFormat.CHANNELS_LAST))
    >>> cfg.output_shape, str(cfg.output_layout)
    ((1, 96, 96, 3), 'nhwc')
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from mobilize.core.errors import ConfigError, UserError
from mobilize.core.inputs import InputSpec, MemoryFormat

from .config import IMAGENET_MEAN, IMAGENET_STD, FrameConfig, Layout
from .encode import encode_frame, moving_pattern

SYNTHETIC_FRAMES = 8
"""Distinct frames of the synthetic moving pattern, cycled through the timed loop."""
MAX_FRAME_SIDE = 16384
"""The largest frame width or height ``--frames`` takes (a 268-megapixel frame; no phone camera streams more)."""
_SPEC = re.compile(r"^(?P<layout>[a-z0-9]+):(?P<w>\d+)x(?P<h>\d+)(?::(?P<rot>-?\d+))?$")


@dataclasses.dataclass(frozen=True)
class FrameSpec:
    """``LAYOUT:WIDTHxHEIGHT[:ROTATION]`` as given to ``--frames``."""

    layout: str
    width: int
    height: int
    rotation: int = 0

    def __str__(self) -> str:
        return f"{self.layout}:{self.width}x{self.height}" + (f":{self.rotation}" if self.rotation else "")


def parse_frame_spec(text: str) -> FrameSpec:
    """``nv21:1920x1080:90`` -> FrameSpec; anything else is a one-line ConfigError."""
    layouts = ", ".join(m.value for m in Layout)
    m = _SPEC.match(text.strip().lower())
    if m is None:
        raise ConfigError(f"--frames {text!r} is not LAYOUT:WIDTHxHEIGHT[:ROTATION]",
                          hint=f"e.g. --frames nv21:1920x1080:90; layouts: {layouts}")
    if m["layout"] not in {v.value for v in Layout}:
        raise ConfigError(f"--frames {text!r}: unknown layout '{m['layout']}'", hint=f"choose one of: {layouts}")
    spec = FrameSpec(m["layout"], int(m["w"]), int(m["h"]), int(m["rot"] or 0))
    if max(spec.width, spec.height) > MAX_FRAME_SIDE:
        raise ConfigError(f"--frames {text!r}: {spec.width}x{spec.height} is beyond the largest frame taken "
                          f"({MAX_FRAME_SIDE} pixels a side)", hint="give the size the camera delivers, e.g. 1920x1080")
    cfg = FrameConfig(width=spec.width, height=spec.height, layout=spec.layout, rotation=spec.rotation,
                      output_size=(1, 1))  # the frame's own checks (even sizes for YUV, the rotation)
    _check_memory(text, cfg)
    return spec


def _check_memory(text: str, cfg: FrameConfig) -> None:
    """The synthetic frames (and the RGB image each is drawn from) must fit in the memory available now."""
    from mobilize.core.inputs import available_memory_bytes

    need = SYNTHETIC_FRAMES * cfg.frame_nbytes + 3 * cfg.width * cfg.height
    have = available_memory_bytes()
    if have is not None and need > have:
        raise ConfigError(f"--frames {text!r}: {SYNTHETIC_FRAMES} frames of {cfg.width}x{cfg.height} need "
                          f"{need / 1e9:.1f} GB; this machine has {have / 1e9:.1f} GB available",
                          hint="give a smaller frame size")


def frame_config_for(spec: FrameSpec, input_spec: InputSpec, resize: str = "nearest",
                     mean: tuple = IMAGENET_MEAN, std: tuple = IMAGENET_STD) -> FrameConfig:
    """The converter settings that write ``input_spec`` directly: its size, its dtype and its memory
    layout (a channels-last input gets NHWC from the converter, so nothing transposes after it)."""
    shape = tuple(input_spec.shape)
    if len(shape) != 4 or shape[0] != 1 or shape[1] != 3 or min(shape) <= 0:
        raise ConfigError(f"--frames feeds one (1,3,H,W) image input; the model takes {input_spec}",
                          hint="give --input_dims 1,3,H,W if the file does not say")
    if input_spec.dtype not in ("float", "uint8"):
        raise ConfigError(f"--frames makes float32 (normalised) or uint8 inputs; the model takes {input_spec.dtype}")
    nhwc = input_spec.memory_format == MemoryFormat.CHANNELS_LAST
    return FrameConfig(width=spec.width, height=spec.height, layout=spec.layout, rotation=spec.rotation,
                       output_size=(shape[2], shape[3]), resize=resize, mean=mean, std=std,
                       output_layout="nhwc" if nhwc else "nchw",
                       output_dtype="float32" if input_spec.dtype == "float" else "uint8")


def normalization(target: Any) -> tuple[tuple, tuple, str]:
    """(mean, std, where from): a manifest's ``input_normalization`` {mean, std}, else ImageNet's, the
    transform every mobilize data source applies (and the zoo models were trained with)."""
    path = getattr(target, "path", None)
    manifest = Path(str(path) + ".manifest.json") if path is not None else None
    if manifest is not None and manifest.is_file():
        norm = json.loads(manifest.read_text()).get("input_normalization")
        if norm:
            return tuple(norm["mean"]), tuple(norm["std"]), f"manifest {manifest.name}"
    return IMAGENET_MEAN, IMAGENET_STD, "ImageNet mean/std (mobilize's data transform)"


def load_frames(cfg: FrameConfig, source: str | None) -> tuple[list[np.ndarray], str]:
    """The frames to cycle through and where they came from: every whole frame in a file or in the
    files of a folder (sorted by name; a file may hold several frames back to back), or, with no
    source, `SYNTHETIC_FRAMES` frames of a moving pattern."""
    if source is None:
        frames = [np.frombuffer(encode_frame(moving_pattern(cfg.height, cfg.width, i), cfg.layout,
                                             row_stride=cfg.stride), np.uint8) for i in range(SYNTHETIC_FRAMES)]
        return frames, f"synthetic moving pattern ({SYNTHETIC_FRAMES} frames)"
    from mobilize.core.paths import check_input_path

    check_input_path(source, "--frames-from")  # a FIFO would block the read for ever
    path = Path(source)
    if not path.exists():
        raise UserError(f"--frames-from {source}: no such file or folder")
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")) if path.is_dir() else [path]
    size = cfg.frame_nbytes
    frames: list[np.ndarray] = []
    for f in files:
        data = np.fromfile(f, np.uint8)
        if data.size == 0 or data.size % size:
            raise UserError(f"--frames-from: {f} has {data.size} bytes, not a whole number of "
                            f"{cfg.width}x{cfg.height} {cfg.layout.value} frames ({size} bytes each)",
                            hint="check --frames LAYOUT:WIDTHxHEIGHT against how the frames were saved")
        frames += list(data.reshape(-1, size))
    if not frames:
        raise UserError(f"--frames-from {source}: the folder has no frame files")
    return frames, f"{len(frames)} frame(s) from {source}"


def native_config(cfg: FrameConfig) -> str:
    """``cfg`` as the ``key=value`` line ``camera_convert.h``'s ``parse_frame_config`` reads (numbers
    written with ``repr``, so the C++ side parses the very same doubles)."""
    crop_h, crop_w = cfg.crop_size or (0, 0)
    out_h, out_w = cfg.output_size
    items = {"width": cfg.width, "height": cfg.height, "layout": cfg.layout.value, "row_stride": cfg.stride,
             "chroma_row_stride": cfg.chroma_stride, "rotation": cfg.rotation, "crop": cfg.crop.value,
             "crop_h": crop_h, "crop_w": crop_w, "out_h": out_h, "out_w": out_w, "resize": cfg.resize.value,
             "color_range": cfg.color_range.value, "mean": ",".join(map(repr, map(float, cfg.mean))),
             "std": ",".join(map(repr, map(float, cfg.std))), "channel_order": cfg.channel_order.value,
             "output_layout": cfg.output_layout.value, "output_dtype": cfg.output_dtype.value}
    return " ".join(f"{k}={v}" for k, v in items.items())
