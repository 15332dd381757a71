"""Bad configs, frames and output buffers fail with errors that say what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from mobilize.camera import FrameConfig, FrameConverter, FrameError
from mobilize.core.errors import ConfigError, UserError


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(width=641, height=480), "needs an even width and height; got 641x480"),
        (dict(width=640, height=479, layout="i420"), "even width and height"),
        (dict(width=640, height=480, row_stride=600), "row_stride=600 is smaller than one row"),
        (dict(width=640, height=480, layout="rgb", row_stride=1919), "(1920 bytes"),
        (dict(width=640, height=480, layout="i420", chroma_row_stride=300),
         "chroma_row_stride=300 is smaller than one chroma row (320 bytes"),
        (dict(width=640, height=480, layout="yuyv"), "unknown layout 'yuyv'"),
        (dict(width=640, height=480, resize="bicubic"), "unknown resize 'bicubic'"),
        (dict(width=640, height=480, rotation=45), "rotation must be 0, 90, 180 or 270"),
        (dict(width=640, height=480, output_size=(500, 500)),
         "output_size 500x500 (HxW) is larger than the crop 480x480"),
        (dict(width=160, height=120), "upsampling is not supported"),
        (dict(width=640, height=480, crop_size=(500, 500)), "larger than the rotated frame"),
        (dict(width=640, height=480, crop_size=(100, 100)), "larger than the crop 100x100"),
        (dict(width=640, height=480, crop="none", crop_size=(300, 300)), "only used with"),
        (dict(width=640, height=480, std=(0.2, 0.0, 0.2)), "three positive numbers"),
        (dict(width=0, height=480), "width must be an integer >= 1"),
    ],
)
def test_bad_config(kwargs, message):
    with pytest.raises(ConfigError) as info:
        FrameConfig(**kwargs)
    assert message in str(info.value)


def test_unknown_choice_lists_the_options():
    with pytest.raises(ConfigError, match=r"choose one of: nv21, nv12, i420, rgb, bgr"):
        FrameConfig(width=64, height=64, layout="yuv422")


@pytest.fixture(scope="module")
def conv():
    return FrameConverter(FrameConfig(width=64, height=48, layout="nv21", row_stride=80,
                                      output_size=(32, 32)))


def test_wrong_frame_size(conv):
    assert conv.frame_nbytes == 80 * 48 + 80 * 24
    with pytest.raises(FrameError) as info:
        conv(bytes(64 * 48 * 3 // 2))  # forgot the row padding
    text = str(info.value)
    assert "frame has 4608 bytes" in text and "row_stride=80 needs 5760" in text
    assert "48 Y rows x 80 bytes + 24 chroma rows x 80 bytes" in text


def test_frame_of_wrong_type(conv):
    with pytest.raises(FrameError, match="bytes-like or a uint8 numpy array, got list"):
        conv([0] * conv.frame_nbytes)
    with pytest.raises(FrameError, match="uint8 data, got dtype float32"):
        conv(np.zeros(conv.frame_nbytes, dtype=np.float32))


@pytest.mark.parametrize(
    ("out", "message"),
    [
        (np.empty((1, 3, 32, 31), np.float32), "shape (1, 3, 32, 31) (need (1, 3, 32, 32))"),
        (np.empty((1, 3, 32, 32), np.float64), "dtype float64 (need float32)"),
        (np.empty((1, 3, 32, 64), np.float32)[..., ::2], "not C-contiguous"),
        (np.empty((1, 32, 32, 3), np.float32), "shape (1, 32, 32, 3)"),
        ([0.0] * 3072, "out must be a numpy array"),
    ],
)
def test_bad_output_buffer(conv, out, message):
    with pytest.raises(FrameError) as info:
        conv(bytes(conv.frame_nbytes), out=out)
    assert message in str(info.value)


def test_read_only_output(conv):
    out = conv.new_output()
    out.flags.writeable = False
    with pytest.raises(FrameError, match="read-only"):
        conv(bytes(conv.frame_nbytes), out=out)


def test_short_plane(conv):
    y = bytes(80 * 47 + 64)
    with pytest.raises(FrameError, match="v plane has 100 bytes; .* needs at least 1903"):
        conv.convert_planes(y, bytes(1903), bytes(100))


def test_packed_frame_shape_and_strides():
    conv = FrameConverter(FrameConfig(width=64, height=48, layout="rgb", output_size=(32, 32)))
    with pytest.raises(FrameError, match=r"need uint8 \(48, 64, 3\) rgb"):
        conv(np.zeros((64, 48, 3), np.uint8))
    with pytest.raises(FrameError, match=r"need \(192, 3, 1\)"):
        conv(np.zeros((48, 80, 3), np.uint8)[:, :64])  # padded rows, but config says tight
    with pytest.raises(FrameError, match="needs a YUV layout"):
        conv.convert_planes(b"", b"", b"")


def test_errors_are_user_errors():
    assert issubclass(FrameError, UserError) and issubclass(ConfigError, UserError)
