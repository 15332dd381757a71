"""`FrameConfig`: what a camera frame looks like and what tensor the model wants from it.

A frozen dataclass that round-trips through JSON/YAML: choices are `StrEnum`s, so plain
strings parse directly, and lists become tuples.

    >>> from mobilize.camera import FrameConfig
    >>> cfg = FrameConfig(width=1920, height=1080, layout="nv21", rotation=90)
    >>> cfg.frame_nbytes, cfg.rotated_size, cfg.crop_box
    (3110400, (1920, 1080), (420, 0, 1080, 1080))
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from mobilize.core.errors import ConfigError

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)


class Layout(enum.StrEnum):
    """Memory layout of the incoming frame."""

    NV21 = "nv21"  # Y plane, then interleaved V,U (Android camera default)
    NV12 = "nv12"  # Y plane, then interleaved U,V
    I420 = "i420"  # Y plane, then U plane, then V plane (YUV420p)
    RGB = "rgb"  # packed 8-bit R,G,B per pixel (HWC)
    BGR = "bgr"  # packed 8-bit B,G,R per pixel (HWC, OpenCV's order)

    @property
    def is_yuv(self) -> bool:
        return self in (Layout.NV21, Layout.NV12, Layout.I420)


class Crop(enum.StrEnum):
    CENTER = "center"  # centred region (of `crop_size`, or the largest with the output's aspect)
    NONE = "none"  # the whole rotated frame, squeezed to the output size


class Resize(enum.StrEnum):
    NEAREST = "nearest"  # pixel-centre nearest neighbour
    BILINEAR = "bilinear"  # half-pixel centres (align_corners=False), like cv2.INTER_LINEAR


class ColorRange(enum.StrEnum):
    FULL = "full"  # BT.601 full range (JPEG/JFIF; Android camera NV21): Y, U, V in 0..255
    VIDEO = "video"  # BT.601 limited range: Y in 16..235, U, V in 16..240


class ChannelOrder(enum.StrEnum):
    RGB = "rgb"
    BGR = "bgr"


class OutputLayout(enum.StrEnum):
    NCHW = "nchw"
    NHWC = "nhwc"


class OutputDtype(enum.StrEnum):
    FLOAT32 = "float32"  # normalised: (pixel / 255 - mean) / std
    UINT8 = "uint8"  # raw 0..255 pixels, for quantized model inputs; mean/std are not applied


def _enum(kind: type[enum.StrEnum], value: Any, name: str) -> Any:
    try:
        return kind(str(value).lower())
    except ValueError:
        options = ", ".join(m.value for m in kind)
        raise ConfigError(f"unknown {name} {value!r}", hint=f"choose one of: {options}") from None


def _int(value: Any, name: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _size(value: Any, name: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    try:
        h, w = value
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be (height, width), got {value!r}") from None
    return (_int(h, f"{name} height"), _int(w, f"{name} width"))


def _triple(value: Any, name: str, *, positive: bool = False) -> tuple[float, float, float]:
    try:
        triple = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be three numbers (R, G, B), got {value!r}") from None
    if len(triple) != 3 or (positive and min(triple) <= 0):
        need = "three positive numbers" if positive else "three numbers"
        raise ConfigError(f"{name} must be {need} (R, G, B), got {value!r}")
    return triple  # type: ignore[return-value]


@dataclass(frozen=True)
class FrameConfig:
    """One camera stream's frame format and the model input built from it."""

    width: int
    """Frame width in pixels, as the sensor delivers it (before rotation)."""
    height: int
    """Frame height in pixels, before rotation."""
    layout: Layout = Layout.NV21
    """Memory layout of the frame: nv21, nv12, i420 (YUV 4:2:0) or rgb, bgr (packed HWC)."""
    row_stride: int | None = None
    """Bytes from one row of the Y (or packed RGB) plane to the next; None = tightly packed."""
    chroma_row_stride: int | None = None
    """Bytes between chroma rows; None = `row_stride` (nv21/nv12) or `row_stride // 2` (i420)."""
    rotation: int = 0
    """Degrees to rotate the frame clockwise so it is upright (Android's sensor orientation)."""
    crop: Crop = Crop.CENTER
    """Which region of the rotated frame becomes the output (see `crop_size`)."""
    crop_size: tuple[int, int] | None = None
    """(height, width) of the centre crop in rotated pixels; None = largest region with the
    output's aspect ratio (what `imageYUV420CenterCropToFloatBuffer` does)."""
    output_size: tuple[int, int] = (224, 224)
    """(height, width) of the model input; must not exceed the crop (no upsampling)."""
    resize: Resize = Resize.NEAREST
    """How the crop is scaled down to `output_size`."""
    color_range: ColorRange = ColorRange.FULL
    """BT.601 range of the YUV data; ignored for rgb/bgr frames."""
    mean: tuple[float, float, float] = IMAGENET_MEAN
    """Per-channel mean (R, G, B) in 0..1 pixel units, subtracted for float32 output."""
    std: tuple[float, float, float] = IMAGENET_STD
    """Per-channel std (R, G, B) in 0..1 pixel units, divided for float32 output."""
    channel_order: ChannelOrder = ChannelOrder.RGB
    """Channel order of the output tensor (mean/std stay given as R, G, B)."""
    output_layout: OutputLayout = OutputLayout.NCHW
    """(1, 3, H, W) or (1, H, W, 3)."""
    output_dtype: OutputDtype = OutputDtype.FLOAT32
    """float32 (normalised) or uint8 (raw pixels, mean/std not applied)."""

    def __post_init__(self) -> None:
        """Parse every field from its YAML/CLI spelling and check it, collecting the first bad value per field.

        Long because it is one check per field of the frame configuration, in field order."""
        set_ = object.__setattr__
        layout = _enum(Layout, self.layout, "layout")
        set_(self, "layout", layout)
        for name, kind in (("crop", Crop), ("resize", Resize), ("color_range", ColorRange),
                           ("channel_order", ChannelOrder), ("output_layout", OutputLayout),
                           ("output_dtype", OutputDtype)):
            set_(self, name, _enum(kind, getattr(self, name), name))
        w, h = _int(self.width, "width"), _int(self.height, "height")
        if layout.is_yuv and (w % 2 or h % 2):
            raise ConfigError(
                f"{layout.value} is YUV 4:2:0, which needs an even width and height; got {w}x{h}",
                hint="check the frame size your camera reports")
        row_bytes = w * (3 if not layout.is_yuv else 1)
        stride = row_bytes if self.row_stride is None else _int(self.row_stride, "row_stride")
        if stride < row_bytes:
            raise ConfigError(
                f"row_stride={stride} is smaller than one row of the frame ({row_bytes} bytes "
                f"for width {w} {layout.value})", hint="row_stride is in bytes and >= width")
        chroma_row_bytes, chroma_stride = 0, 0
        if layout.is_yuv:
            chroma_row_bytes = w if layout is not Layout.I420 else w // 2
            default = stride if layout is not Layout.I420 else stride // 2
            chroma_stride = default if self.chroma_row_stride is None else _int(
                self.chroma_row_stride, "chroma_row_stride")
            if chroma_stride < chroma_row_bytes:
                raise ConfigError(
                    f"chroma_row_stride={chroma_stride} is smaller than one chroma row "
                    f"({chroma_row_bytes} bytes for width {w} {layout.value})")
        elif self.chroma_row_stride is not None:
            raise ConfigError(f"chroma_row_stride is only for YUV layouts, not {layout.value}")
        rotation = self.rotation
        if not isinstance(rotation, int) or isinstance(rotation, bool) or rotation % 90 \
                or not 0 <= rotation < 360:
            raise ConfigError(f"rotation must be 0, 90, 180 or 270 degrees, got {rotation!r}")
        out_h, out_w = _size(self.output_size, "output_size")
        set_(self, "output_size", (out_h, out_w))
        rot_h, rot_w = (w, h) if rotation in (90, 270) else (h, w)
        crop = self.crop
        if crop is Crop.NONE:
            if self.crop_size is not None:
                raise ConfigError("crop_size is only used with crop='center'")
            crop_h, crop_w = rot_h, rot_w
        elif self.crop_size is not None:
            crop_h, crop_w = _size(self.crop_size, "crop_size")
            set_(self, "crop_size", (crop_h, crop_w))
            if crop_h > rot_h or crop_w > rot_w:
                raise ConfigError(
                    f"crop_size {crop_h}x{crop_w} (HxW) is larger than the rotated frame "
                    f"{rot_h}x{rot_w}")
        elif out_w * rot_h <= out_h * rot_w:  # frame is wider than the output: crop the width
            crop_h, crop_w = rot_h, min(rot_w, round(rot_h * out_w / out_h))
        else:
            crop_h, crop_w = min(rot_h, round(rot_w * out_h / out_w)), rot_w
        if out_h > crop_h or out_w > crop_w:
            raise ConfigError(
                f"output_size {out_h}x{out_w} (HxW) is larger than the crop {crop_h}x{crop_w} "
                f"of the {rot_h}x{rot_w} rotated frame; upsampling is not supported",
                hint="use a smaller output_size or a larger crop_size / frame")
        set_(self, "mean", _triple(self.mean, "mean"))
        set_(self, "std", _triple(self.std, "std", positive=True))
        y_bytes = stride * h
        chroma_bytes = chroma_stride * (h // 2) * (2 if layout is Layout.I420 else 1)
        # Derived geometry: a plain attribute, not a field, so asdict/eq/hash ignore it.
        set_(self, "_derived", dict(
            row_bytes=row_bytes, stride=stride, chroma_row_bytes=chroma_row_bytes,
            chroma_stride=chroma_stride, rotated_size=(rot_h, rot_w),
            crop_box=((rot_h - crop_h) // 2, (rot_w - crop_w) // 2, crop_h, crop_w),
            frame_nbytes=y_bytes + chroma_bytes,
            last_row_padding=(chroma_stride - chroma_row_bytes) if layout.is_yuv
            else stride - row_bytes))

    # -- derived geometry -------------------------------------------------------------------
    @property
    def stride(self) -> int:
        """Row stride of the Y (or packed RGB) plane in bytes, with the default filled in."""
        return self._derived["stride"]

    @property
    def chroma_stride(self) -> int:
        """Row stride of the chroma plane(s) in bytes (0 for rgb/bgr)."""
        return self._derived["chroma_stride"]

    @property
    def rotated_size(self) -> tuple[int, int]:
        """(height, width) of the frame after rotation."""
        return self._derived["rotated_size"]

    @property
    def crop_box(self) -> tuple[int, int, int, int]:
        """(top, left, height, width) of the crop, in rotated-frame pixels."""
        return self._derived["crop_box"]

    @property
    def frame_nbytes(self) -> int:
        """Size of one whole frame passed as a single buffer: every plane is rows x stride
        (the buffer may also be `last_row_padding` bytes shorter)."""
        return self._derived["frame_nbytes"]

    @property
    def last_row_padding(self) -> int:
        """Padding bytes at the end of the last row; a frame buffer may leave them out."""
        return self._derived["last_row_padding"]

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        h, w = self.output_size
        return (1, 3, h, w) if self.output_layout is OutputLayout.NCHW else (1, h, w, 3)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-ready values; `FrameConfig(**cfg.to_dict()) == cfg`."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = (str(value) if isinstance(value, enum.Enum)
                           else list(value) if isinstance(value, tuple) else value)
        return out
