"""The per-stream precomputation behind `FrameConverter`: where each output pixel reads the
frame, and one affine per output channel that does colour conversion and normalisation.

Everything here runs once per `FrameConfig`; nothing here runs per frame.

    >>> from mobilize.camera import FrameConfig
    >>> from mobilize.camera.plan import build_plan
    >>> plan = build_plan(FrameConfig(width=64, height=48, output_size=(8, 8)))
    >>> plan.taps, plan.index[0][0].shape, plan.weights is None
    (1, (64,), True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import ChannelOrder, ColorRange, FrameConfig, Layout, OutputDtype, Resize

# BT.601 luma weights.
_KR, _KB = 0.299, 0.114
_KG = 1.0 - _KR - _KB


@dataclass(frozen=True)
class Plan:
    """Precomputed sampling and colour maths for one `FrameConfig`.

    Output channel c of a pixel is ``gain[c] * pixel + offset[c]`` where ``pixel`` blends,
    over the taps, ``matrix[c] @ (source - source_offset)`` clipped to 0..255 when `clip` is set.
    """

    taps: int
    """Samples blended per output pixel: 1 (nearest) or 4 (bilinear)."""
    index: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]
    """Per tap, three (N,) intp arrays: flat offsets into source planes 0, 1, 2 (for YUV: Y,
    U, V; for packed RGB: R, G, B).  Planes that share offsets share one array."""
    weights: np.ndarray | None
    """(taps, N) float32 blend weights (summing to 1 per pixel), or None for nearest."""
    matrix: np.ndarray
    """(3 output channels, 3 source planes) colour matrix, in 0..255 pixel units."""
    source_offset: np.ndarray
    """(3,) subtracted from the source planes first: BT.601's 16 (video-range luma) and 128
    (chroma); zeros for packed RGB."""
    clip: bool
    """Whether decoded pixels can leave 0..255 and must be clipped (YUV input)."""
    gain: np.ndarray
    """(3,) 1 / (255 std) for float32 output; 1 for uint8."""
    offset: np.ndarray
    """(3,) -mean / std for float32 output; +0.5 for uint8 (the cast then rounds)."""


def _axis_taps(n_out: int, start: int, length: int, resize: Resize):
    """Source positions along one axis: [(positions, weight)] for each tap."""
    centres = (np.arange(n_out, dtype=np.float64) + 0.5) * (length / n_out)
    if resize is Resize.NEAREST:
        pos = np.minimum(np.floor(centres).astype(np.intp), length - 1)
        return [(start + pos, None)]
    f = np.clip(centres - 0.5, 0.0, length - 1)
    lo = np.floor(f).astype(np.intp)
    hi = np.minimum(lo + 1, length - 1)
    w_hi = f - lo
    return [(start + lo, 1.0 - w_hi), (start + hi, w_hi)]


def _to_source(ri: np.ndarray, rj: np.ndarray, rotation: int, h: int, w: int):
    """Rotated-frame (row, col) -> unrotated frame (row, col); rotation is clockwise."""
    if rotation == 0:
        return ri, rj
    if rotation == 90:
        return h - 1 - rj, ri
    if rotation == 180:
        return h - 1 - ri, w - 1 - rj
    return rj, w - 1 - ri


def _plane_offsets(cfg: FrameConfig, rows: np.ndarray, cols: np.ndarray):
    """Flat offsets of pixels (rows, cols) in each of the three source planes.

    A packed RGB frame is three planes ``buffer[0:]``, ``buffer[1:]``, ``buffer[2:]`` that share
    one offset array; U and V share one too (NV21's are ``vu[1:]`` and ``vu[0:]``).
    """
    if not cfg.layout.is_yuv:
        packed = rows * cfg.stride + cols * 3
        return (packed, packed, packed)
    pixel_step = 1 if cfg.layout is Layout.I420 else 2
    chroma = (rows // 2) * cfg.chroma_stride + (cols // 2) * pixel_step
    return (rows * cfg.stride + cols, chroma, chroma)


def _color(cfg: FrameConfig):
    """(matrix, source_offset, clip, gain, offset) for `Plan`, rows in output channel order."""
    if cfg.layout.is_yuv:
        # RGB = M @ (Y - y0, U - 128, V - 128) * gains, in 0..255 units.
        y0, y_gain, c_gain = (0.0, 1.0, 1.0) if cfg.color_range is ColorRange.FULL else (
            16.0, 255.0 / 219.0, 255.0 / 224.0)
        matrix = np.array([
            [1.0, 0.0, 2.0 * (1.0 - _KR)],
            [1.0, -2.0 * _KB * (1.0 - _KB) / _KG, -2.0 * _KR * (1.0 - _KR) / _KG],
            [1.0, 2.0 * (1.0 - _KB), 0.0],
        ]) * np.array([y_gain, c_gain, c_gain])
        source_offset = np.array([y0, 128.0, 128.0])
    else:
        matrix, source_offset = np.eye(3), np.zeros(3)
        if cfg.layout is Layout.BGR:
            matrix = matrix[::-1].copy()  # output R reads source plane 2
    if cfg.output_dtype is OutputDtype.FLOAT32:
        gain = 1.0 / (255.0 * np.asarray(cfg.std))
        offset = -np.asarray(cfg.mean) / np.asarray(cfg.std)
    else:
        gain, offset = np.ones(3), np.full(3, 0.5)
    if cfg.channel_order is ChannelOrder.BGR:
        matrix, gain, offset = (a[::-1].copy() for a in (matrix, gain, offset))
    return matrix, source_offset, cfg.layout.is_yuv, gain, offset


def build_plan(cfg: FrameConfig) -> Plan:
    top, left, crop_h, crop_w = cfg.crop_box
    out_h, out_w = cfg.output_size
    row_taps = _axis_taps(out_h, top, crop_h, cfg.resize)
    col_taps = _axis_taps(out_w, left, crop_w, cfg.resize)
    index, weights = [], []
    for ri, wi in row_taps:
        for rj, wj in col_taps:
            grid_i, grid_j = np.meshgrid(ri, rj, indexing="ij")
            rows, cols = _to_source(grid_i.ravel(), grid_j.ravel(), cfg.rotation,
                                    cfg.height, cfg.width)
            index.append(_plane_offsets(cfg, rows, cols))
            if wi is not None:
                weights.append(np.outer(wi, wj).ravel())
    matrix, source_offset, clip, gain, offset = _color(cfg)
    return Plan(
        taps=len(index), index=tuple(index),
        weights=np.asarray(weights, dtype=np.float32) if weights else None,
        matrix=matrix, source_offset=source_offset, clip=clip, gain=gain, offset=offset)
