"""`FrameConverter`: one camera frame in, one model-input tensor out, in one pass.

Only the output pixels are converted: the plan says where each one reads the frame (after
rotation, crop and resize), so a frame costs a gather of Y, U and V at those offsets plus one
affine per output channel (colour matrix, 1/255, mean and std folded together), written into
the caller's buffer.  All scratch memory is allocated once, in the constructor.

    >>> import numpy as np
    >>> from mobilize.camera import FrameConfig, FrameConverter
    >>> conv = FrameConverter(FrameConfig(width=640, height=480, layout="nv21", rotation=90))
    >>> out = conv.new_output()
    >>> frame = np.full(640 * 480 * 3 // 2, 128, dtype=np.uint8)  # mid-grey NV21 frame
    >>> conv(frame, out=out) is out, out.shape, round(float(out[0, 0, 0, 0]), 3)
    (True, (1, 3, 224, 224), 0.074)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mobilize.core.errors import UserError

from .config import FrameConfig, Layout, OutputDtype, OutputLayout
from .plan import Plan, build_plan


class FrameError(UserError):
    """A frame, plane or output buffer does not match the converter's `FrameConfig`."""


def _as_bytes(obj: Any, name: str) -> np.ndarray:
    """A 1-D uint8 view of a bytes-like object or uint8 array (never a copy)."""
    if isinstance(obj, np.ndarray):
        if obj.dtype != np.uint8:
            raise FrameError(f"{name} must hold uint8 data, got dtype {obj.dtype}")
        if obj.flags.c_contiguous:
            return obj.reshape(-1)
        if obj.ndim >= 2:
            return _rows_view(obj, name)
        raise FrameError(f"{name} must be contiguous, got strides {obj.strides}")
    try:
        return np.frombuffer(obj, dtype=np.uint8)
    except (TypeError, ValueError, BufferError):
        raise FrameError(f"{name} must be bytes-like or a uint8 numpy array, got "
                         f"{type(obj).__name__}") from None


def _rows_view(arr: np.ndarray, name: str) -> np.ndarray:
    """Flat view over a row-strided 2-D/3-D array (rows of bytes that are each contiguous):
    element ``r * row_stride + k`` is byte k of row r, padding between rows included."""
    inner = arr[0]
    if not inner.flags.c_contiguous:
        raise FrameError(f"each row of {name} must be contiguous; got strides {arr.strides}")
    row_stride = arr.strides[0]
    if row_stride < inner.nbytes:
        raise FrameError(f"{name} rows overlap (stride {row_stride} < row of {inner.nbytes} bytes)")
    length = (arr.shape[0] - 1) * row_stride + inner.nbytes
    return np.lib.stride_tricks.as_strided(arr, shape=(length,), strides=(1,), writeable=False)


class FrameConverter:
    """Converts frames described by one `FrameConfig` into model input tensors.

    Build it once per camera stream; call it per frame.  ``conv(frame, out=buf)`` writes into
    ``buf`` (shape `output_shape`, dtype `output_dtype`, C-contiguous) and returns it.  With
    ``out=None`` it allocates a new array each call.  A torch tensor can be the target through
    ``tensor.numpy()``, which shares its memory.  Not thread-safe: one converter per thread.
    """

    def __init__(self, config: FrameConfig):
        self.config = config
        self.plan: Plan = build_plan(config)
        self.output_shape = config.output_shape
        self.output_dtype = np.dtype(config.output_dtype.value)
        n = config.output_size[0] * config.output_size[1]
        self._n = n
        plan, f32 = self.plan, np.float32
        if plan.weights is None:
            # Nearest: one affine per channel from the raw samples straight to output units,
            # clipped to the 0..255 gamut expressed in output units.
            scale = plan.matrix * plan.gain[:, None]
            # Written out, not `scale @ source_offset`: the C++ twin (native/cpp/camera_convert.h)
            # sums in this order, so the two agree to the bit.
            so = plan.source_offset
            bias = plan.offset - (scale[:, 0] * so[0] + scale[:, 1] * so[1] + scale[:, 2] * so[2])
            bounds = np.stack([plan.offset, 255.0 * plan.gain + plan.offset], axis=1)
            self._terms = [[(k, f32(s)) for k, s in enumerate(row) if s != 0.0] for row in scale]
            self._bias = [f32(b) for b in bias]
            self._blend = None
        else:
            # Bilinear: per tap, samples minus source_offset, colour matrix in pixel units,
            # clipped to 0..255, times (weight x gain), summed; the offset is added at the end.
            bounds = np.array([[0.0, 255.0]] * 3)
            # Unit coefficients become plain adds; a scaled term goes first to start the sum.
            self._terms = [sorted([(k, None if s == 1.0 else f32(s)) for k, s in enumerate(row)
                                   if s != 0.0], key=lambda term: term[1] is None)
                           for row in plan.matrix]
            self._source_offset = [(k, f32(o)) for k, o in enumerate(plan.source_offset) if o]
            self._blend = (plan.weights[:, None, :] * plan.gain[None, :, None]).astype(f32)
        self._bounds = [(f32(lo), f32(hi)) for lo, hi in bounds] if plan.clip else None
        self._offset = [f32(o) for o in plan.offset]
        # Scratch, allocated once: gathered samples, float samples, two temporaries, channels.
        self._gathered = np.empty((plan.taps, 3, n), dtype=np.uint8)
        self._samples = np.empty((3, n), dtype=np.float32)
        self._tmp = np.empty((2, n), dtype=np.float32)
        direct = (config.output_layout is OutputLayout.NCHW
                  and config.output_dtype is OutputDtype.FLOAT32)
        self._channels = None if direct else np.empty((3, n), dtype=np.float32)

    # -- public -----------------------------------------------------------------------------
    @property
    def frame_nbytes(self) -> int:
        """Bytes in one whole-frame buffer (see `FrameConfig.frame_nbytes`)."""
        return self.config.frame_nbytes

    def new_output(self) -> np.ndarray:
        """A fresh output buffer of the right shape and dtype, to reuse frame after frame."""
        return np.empty(self.output_shape, dtype=self.output_dtype)

    def __call__(self, frame: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Convert one whole frame: a bytes-like object or uint8 array holding every plane
        back to back (rows x stride each), or for rgb/bgr also an (H, W, 3) array whose rows
        may be padded to `row_stride`."""
        cfg = self.config
        if isinstance(frame, np.ndarray) and frame.ndim == 3 and not cfg.layout.is_yuv:
            self._check_packed_image(frame)
            flat = _rows_view(frame, "frame")
        else:
            flat = _as_bytes(frame, "frame")
            if flat.size not in (cfg.frame_nbytes, cfg.frame_nbytes - cfg.last_row_padding):
                raise FrameError(
                    f"frame has {flat.size} bytes but a {cfg.width}x{cfg.height} "
                    f"{cfg.layout.value} frame with row_stride={cfg.stride} needs "
                    f"{cfg.frame_nbytes}", hint=self._size_hint())
        if not cfg.layout.is_yuv:
            return self._run((flat, flat[1:], flat[2:]), out)
        y_size = cfg.stride * cfg.height
        chroma = flat[y_size:]
        if cfg.layout is Layout.I420:
            u_size = cfg.chroma_stride * (cfg.height // 2)
            return self._run((flat, chroma, chroma[u_size:]), out)
        if cfg.layout is Layout.NV21:
            return self._run((flat, chroma[1:], chroma), out)
        return self._run((flat, chroma, chroma[1:]), out)

    def convert_planes(self, y: Any, u: Any, v: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Convert one YUV frame given as separate planes (Android's ``Image.getPlanes()``).

        Each plane is a bytes-like object or uint8 array with the config's row strides; the
        last row may be short.  For nv12/nv21, ``u`` and ``v`` step 2 bytes per pixel and may
        be overlapping views of the interleaved plane: for an NV21 ``vu`` numpy array or
        memoryview pass ``u=vu[1:], v=vu`` (slicing ``bytes`` would copy).
        """
        cfg = self.config
        if not cfg.layout.is_yuv:
            raise FrameError(f"convert_planes needs a YUV layout; this converter is for "
                             f"{cfg.layout.value} frames, call it on the whole frame instead")
        planes = (_as_bytes(y, "y plane"), _as_bytes(u, "u plane"), _as_bytes(v, "v plane"))
        step = 1 if cfg.layout is Layout.I420 else 2
        c_rows, c_cols = cfg.height // 2, cfg.width // 2
        need = ((cfg.height - 1) * cfg.stride + cfg.width,
                *[(c_rows - 1) * cfg.chroma_stride + (c_cols - 1) * step + 1] * 2)
        for name, plane, size in zip("yuv", planes, need):
            if plane.size < size:
                stride = cfg.stride if name == "y" else cfg.chroma_stride
                raise FrameError(
                    f"{name} plane has {plane.size} bytes; a {cfg.width}x{cfg.height} "
                    f"{cfg.layout.value} frame needs at least {size} (row stride {stride})")
        return self._run(planes, out)

    # -- per frame --------------------------------------------------------------------------
    def _run(self, planes: tuple[np.ndarray, ...], out: np.ndarray | None) -> np.ndarray:
        out = self.new_output() if out is None else self._check_out(out)
        plan, g = self.plan, self._gathered
        for t in range(plan.taps):
            for k in range(3):
                # mode="wrap" skips the bounds error path; the plane sizes were checked.
                np.take(planes[k], plan.index[t][k], out=g[t, k], mode="wrap")
        dest = out.reshape(3, self._n) if self._channels is None else self._channels
        if self._blend is None:
            self._nearest(dest)
        else:
            self._bilinear(dest)
        if self._channels is not None:
            # One channel at a time: a single copyto into the transposed view is ~5x slower.
            target = (out.reshape(3, self._n) if self.config.output_layout is OutputLayout.NCHW
                      else out.reshape(self._n, 3).T)
            for c in range(3):
                np.copyto(target[c], dest[c], casting="unsafe")  # uint8: truncating x+0.5 rounds
        return out

    def _nearest(self, dest: np.ndarray) -> None:
        x, tmp = self._samples, self._tmp[0]
        np.copyto(x, self._gathered[0])
        for c in range(3):
            d = dest[c]
            (k0, s0), *rest = self._terms[c]
            np.multiply(x[k0], s0, out=d)
            for k, s in rest:
                np.multiply(x[k], s, out=tmp)
                np.add(d, tmp, out=d)
            np.add(d, self._bias[c], out=d)
            if self._bounds is not None:
                np.clip(d, *self._bounds[c], out=d)

    def _bilinear(self, dest: np.ndarray) -> None:
        x, (tap_sum, tmp) = self._samples, self._tmp
        for t in range(self.plan.taps):
            np.copyto(x, self._gathered[t])  # a mixed-dtype ufunc would allocate cast buffers
            for k, offset in self._source_offset:
                np.subtract(x[k], offset, out=x[k])
            for c in range(3):
                d = dest[c] if t == 0 else tap_sum
                (k0, s0), *rest = self._terms[c]
                if s0 is None and not rest and self._bounds is None:  # packed RGB input
                    np.multiply(x[k0], self._blend[t, c], out=d)
                    if t:
                        np.add(dest[c], d, out=dest[c])
                    continue
                if s0 is None:
                    np.copyto(d, x[k0])
                else:
                    np.multiply(x[k0], s0, out=d)
                for k, s in rest:
                    if s is None:
                        np.add(d, x[k], out=d)
                    else:
                        np.multiply(x[k], s, out=tmp)
                        np.add(d, tmp, out=d)
                if self._bounds is not None:
                    np.clip(d, *self._bounds[c], out=d)
                np.multiply(d, self._blend[t, c], out=d)
                if t:
                    np.add(dest[c], d, out=dest[c])
        for c in range(3):
            np.add(dest[c], self._offset[c], out=dest[c])

    # -- checks -----------------------------------------------------------------------------
    def _check_out(self, out: Any) -> np.ndarray:
        if not isinstance(out, np.ndarray):
            raise FrameError(f"out must be a numpy array (for a torch tensor pass "
                             f"tensor.numpy()), got {type(out).__name__}")
        problems = []
        if out.shape != self.output_shape:
            problems.append(f"shape {out.shape} (need {self.output_shape})")
        if out.dtype != self.output_dtype:
            problems.append(f"dtype {out.dtype} (need {self.output_dtype})")
        if not out.flags.c_contiguous:
            problems.append("not C-contiguous")
        if not out.flags.writeable:
            problems.append("read-only")
        if problems:
            raise FrameError("output buffer does not fit: " + ", ".join(problems),
                             hint="make one with FrameConverter.new_output()")
        return out

    def _check_packed_image(self, frame: np.ndarray) -> None:
        cfg = self.config
        if frame.dtype != np.uint8 or frame.shape != (cfg.height, cfg.width, 3):
            raise FrameError(
                f"frame is {frame.dtype} {frame.shape}; need uint8 "
                f"({cfg.height}, {cfg.width}, 3) {cfg.layout.value}")
        if frame.strides[1:] != (3, 1) or frame.strides[0] != cfg.stride:
            raise FrameError(
                f"frame strides {frame.strides} do not match the config: need "
                f"({cfg.stride}, 3, 1) (row_stride={cfg.stride})")

    def _size_hint(self) -> str:
        cfg = self.config
        if not cfg.layout.is_yuv:
            return f"{cfg.height} rows x {cfg.stride} bytes"
        chroma_rows = cfg.height // 2 * (2 if cfg.layout is Layout.I420 else 1)
        return (f"{cfg.height} Y rows x {cfg.stride} bytes + {chroma_rows} chroma rows x "
                f"{cfg.chroma_stride} bytes; set row_stride/chroma_row_stride if rows are padded")
