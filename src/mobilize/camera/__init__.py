"""Camera frames (YUV 4:2:0 NV21/NV12/I420, or packed RGB/BGR) to normalised model inputs.

One pass per frame: rotation, centre crop, resize, BT.601 colour conversion, mean/std and the
NCHW/NHWC layout are folded into precomputed gather offsets and one affine per channel, so
only the output pixels are ever converted, straight into a buffer reused frame after frame.

    >>> import numpy as np
    >>> from mobilize.camera import FrameConfig, FrameConverter
    >>> cfg = FrameConfig(width=1920, height=1080, layout="nv21", rotation=90,
    ...                   output_size=(224, 224), resize="bilinear")
    >>> conv = FrameConverter(cfg)
    >>> out = conv.new_output()                      # allocate once
    >>> frame = bytes(cfg.frame_nbytes)              # e.g. Image planes copied from the camera
    >>> conv(frame, out=out) is out, out.shape, out.dtype
    (True, (1, 3, 224, 224), dtype('float32'))
"""

from .config import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ChannelOrder,
    ColorRange,
    Crop,
    FrameConfig,
    Layout,
    OutputDtype,
    OutputLayout,
    Resize,
)
from .converter import FrameConverter, FrameError

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ChannelOrder",
    "ColorRange",
    "Crop",
    "FrameConfig",
    "FrameConverter",
    "FrameError",
    "Layout",
    "OutputDtype",
    "OutputLayout",
    "Resize",
]
