"""RGB images to raw camera frames (the inverse of the converter's colour step): what the synthetic
frame source, the tests and the emitted apps' sample frame are made from.

BT.601 full range (Android's NV21), chroma averaged over each 2x2 block, rows padded to ``row_stride``.

    >>> import numpy as np
    >>> from mobilize.camera.encode import encode_frame
    >>> rgb = np.zeros((4, 6, 3), np.uint8)
    >>> len(encode_frame(rgb, "nv21")), len(encode_frame(rgb, "rgb", row_stride=20))
    (36, 80)
"""

from __future__ import annotations

import numpy as np

from .config import ColorRange, Layout


def _u8(a: np.ndarray) -> np.ndarray:
    return np.clip(np.round(a), 0, 255).astype(np.uint8)


def _rows(plane: np.ndarray, stride: int) -> bytes:
    """A (rows, row_bytes) uint8 plane as bytes, each row padded with zeros to ``stride``."""
    rows, width = plane.shape
    padded = np.zeros((rows, stride), np.uint8)
    padded[:, :width] = plane
    return padded.tobytes()


def encode_frame(rgb: np.ndarray, layout: str | Layout, *, row_stride: int | None = None,
                 chroma_row_stride: int | None = None, color_range: str | ColorRange = "full") -> bytes:
    """One whole frame (every plane, rows x stride each) of an (H, W, 3) uint8 RGB image."""
    layout, color_range = Layout(str(layout).lower()), ColorRange(str(color_range).lower())
    h, w, _ = rgb.shape
    if not layout.is_yuv:
        packed = rgb if layout is Layout.RGB else rgb[..., ::-1]
        return _rows(np.ascontiguousarray(packed).reshape(h, w * 3), row_stride or w * 3)
    x = rgb.astype(np.float64)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u, v = (b - y) / 1.772, (r - y) / 1.402
    if color_range is ColorRange.VIDEO:
        y, u, v = y * 219 / 255 + 16, u * 224 / 255, v * 224 / 255
    u, v = (c.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3)) + 128 for c in (u, v))
    stride = row_stride or w
    y_bytes = _rows(_u8(y), stride)
    if layout is Layout.I420:
        c_stride = chroma_row_stride or stride // 2
        return y_bytes + _rows(_u8(u), c_stride) + _rows(_u8(v), c_stride)
    pair = (v, u) if layout is Layout.NV21 else (u, v)
    interleaved = _u8(np.stack(pair, axis=-1)).reshape(h // 2, w)
    return y_bytes + _rows(interleaved, chroma_row_stride or stride)


def moving_pattern(height: int, width: int, index: int) -> np.ndarray:
    """A synthetic (H, W, 3) uint8 scene that moves from frame to frame: colour gradients, a bright
    disc crossing the frame and diagonal stripes shifting by ``index`` (seeded, no randomness)."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    shift = 37.0 * index
    r = 255.0 * xx / max(width - 1, 1)
    g = 255.0 * yy / max(height - 1, 1)
    b = 127.5 + 127.5 * np.sin((xx + yy + shift) / 23.0)
    cx, cy = (0.2 + 0.6 * ((index * 0.13) % 1.0)) * width, 0.5 * height
    disc = ((xx - cx) ** 2 + (yy - cy) ** 2) < (0.15 * min(height, width)) ** 2
    rgb = np.stack([r, g, b], axis=-1)
    rgb[disc] = 255.0
    return rgb.astype(np.uint8)
