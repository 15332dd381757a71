"""FrameConverter against a straightforward reference on real photos.

The reference does it the slow, obvious way: encode the RGB photo to YUV 4:2:0 (BT.601, chroma
averaged over 2x2 blocks), then decode the whole frame back to RGB in float64 with chroma
repeated 2x2 and clipped to 0..255, rotate with np.rot90, centre-crop, resize (pixel-centre
nearest, or half-pixel bilinear checked against torch.nn.functional.interpolate), normalise.

Error bounds are stated in 0..1 pixel units, i.e. |out - ref| * std per channel, so "1/255"
means one 8-bit level before mean/std.  The issue asks for <= 1/255 (nearest) and a small
bound for bilinear; the converter does the reference's arithmetic (bilinear included: each
tap is decoded and clipped to 0..255 before blending, like cvtColor-then-resize), only in
float32, so both are asserted at <= 0.01/255 (observed: under 1e-4/255).  uint8 output is
within one level of the rounded reference, and differs from it only at .5 ties.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from mobilize.camera import IMAGENET_MEAN, IMAGENET_STD, FrameConfig, FrameConverter

NEAREST_BOUND = 0.01 / 255
BILINEAR_BOUND = 0.01 / 255
MEAN = np.array(IMAGENET_MEAN)
STD = np.array(IMAGENET_STD)


# -- the reference --------------------------------------------------------------------------

@functools.cache
def photo(name: str) -> np.ndarray:
    """A sample photo, cut to an even 426 x 640 so it can be 4:2:0."""
    from sklearn.datasets import load_sample_images

    images = load_sample_images()
    index = [f.endswith(name) for f in images.filenames].index(True)
    return images.images[index][:426]


def encode_planes(rgb: np.ndarray, color_range: str):
    """RGB uint8 -> (Y, U, V) uint8 planes, U and V at half resolution."""
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = (b - y) / 1.772
    v = (r - y) / 1.402
    if color_range == "video":
        y, u, v = 16 + y * 219 / 255, u * 224 / 255, v * 224 / 255
    h, w = y.shape
    u = u.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3)) + 128
    v = v.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3)) + 128
    return tuple(np.clip(np.round(p), 0, 255).astype(np.uint8) for p in (y, u, v))


def pack(planes, layout: str, pad: int, rng) -> tuple[bytes, int, int]:
    """Planes -> one frame buffer with rows padded by `pad` bytes of garbage.
    Returns (buffer, row_stride, chroma_row_stride)."""
    y, u, v = planes
    h, w = y.shape
    stride = w + pad
    c_stride = stride if layout != "i420" else stride // 2

    def rows(plane, row_stride):
        out = rng.integers(0, 256, (plane.shape[0], row_stride), dtype=np.uint8)
        out[:, : plane.shape[1]] = plane
        return out.tobytes()

    if layout == "i420":
        chroma = rows(u, c_stride) + rows(v, c_stride)
    else:
        first, second = (v, u) if layout == "nv21" else (u, v)
        chroma = rows(np.stack([first, second], axis=-1).reshape(h // 2, w), c_stride)
    return rows(y, stride) + chroma, stride, c_stride


def decode(planes, color_range: str) -> np.ndarray:
    """(Y, U, V) -> float64 RGB in 0..255, chroma repeated 2x2, clipped."""
    y, u, v = (p.astype(np.float64) for p in planes)
    u = np.repeat(np.repeat(u, 2, axis=0), 2, axis=1) - 128
    v = np.repeat(np.repeat(v, 2, axis=0), 2, axis=1) - 128
    if color_range == "video":
        y, u, v = (y - 16) * 255 / 219, u * 255 / 224, v * 255 / 224
    rgb = np.stack([y + 1.402 * v, y - 0.344136 * u - 0.714136 * v, y + 1.772 * u], axis=-1)
    return np.clip(rgb, 0, 255)


def center_crop(img: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Largest centred region with the output's aspect ratio."""
    h, w = img.shape[:2]
    if out_w / out_h <= w / h:
        ch, cw = h, round(h * out_w / out_h)
    else:
        ch, cw = round(w * out_h / out_w), w
    top, left = (h - ch) // 2, (w - cw) // 2
    return img[top:top + ch, left:left + cw]


def resize_nearest(img: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    h, w = img.shape[:2]
    rows = np.minimum(((np.arange(out_h) + 0.5) * h / out_h).astype(int), h - 1)
    cols = np.minimum(((np.arange(out_w) + 0.5) * w / out_w).astype(int), w - 1)
    return img[rows][:, cols]


def resize_bilinear(img: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    def axis(n_out, n):
        src = np.clip((np.arange(n_out) + 0.5) * n / n_out - 0.5, 0, n - 1)
        lo = np.floor(src).astype(int)
        return lo, np.minimum(lo + 1, n - 1), src - lo

    r0, r1, wr = axis(out_h, img.shape[0])
    c0, c1, wc = axis(out_w, img.shape[1])
    wr, wc = wr[:, None, None], wc[None, :, None]
    top = img[r0][:, c0] * (1 - wc) + img[r0][:, c1] * wc
    bottom = img[r1][:, c0] * (1 - wc) + img[r1][:, c1] * wc
    return top * (1 - wr) + bottom * wr


def reference(rgb: np.ndarray, rotation: int, out_size, resize: str) -> np.ndarray:
    """float64 RGB (0..255) -> HWC pixels in 0..1 after rotate, crop, resize."""
    img = np.rot90(rgb.astype(np.float64), k=-(rotation // 90))
    img = center_crop(img, *out_size)
    img = (resize_nearest if resize == "nearest" else resize_bilinear)(img, *out_size)
    return img / 255


def pixel_error(out: np.ndarray, ref01: np.ndarray, layout: str = "nchw") -> float:
    """Max |out - ref| in 0..1 pixel units: normalised output times std, per channel."""
    hwc = out[0].transpose(1, 2, 0) if layout == "nchw" else out[0]
    return float(np.abs((hwc * STD + MEAN) - ref01).max())


# -- the reference itself -------------------------------------------------------------------

def test_reference_resize_matches_torch():
    torch = pytest.importorskip("torch")
    img = photo("china.jpg").astype(np.float64)
    t = torch.from_numpy(img.transpose(2, 0, 1).copy())[None]
    for mode, ours in (("bilinear", resize_bilinear), ("nearest-exact", resize_nearest)):
        want = torch.nn.functional.interpolate(t, size=(100, 150), mode=mode,
                                               align_corners=False if mode == "bilinear" else None)
        got = ours(img, 100, 150).transpose(2, 0, 1)
        assert np.abs(got - want[0].numpy()).max() < 1e-9, mode


def test_reference_encode_decode_round_trip():
    rgb = photo("flower.jpg")
    for color_range in ("full", "video"):
        back = decode(encode_planes(rgb, color_range), color_range)
        # 4:2:0 loses chroma detail, so only the mean error is small
        assert np.abs(back - rgb).mean() < 3, color_range


# -- the converter against the reference -----------------------------------------------------

@functools.cache
def case(name: str, color_range: str):
    planes = encode_planes(photo(name), color_range)
    return planes, decode(planes, color_range)


@pytest.mark.parametrize("name", ["china.jpg", "flower.jpg"])
@pytest.mark.parametrize("color_range", ["full", "video"])
@pytest.mark.parametrize("layout", ["nv21", "nv12", "i420"])
@pytest.mark.parametrize("pad", [0, 24])
def test_yuv_all_rotations_and_resizes(name, color_range, layout, pad):
    planes, rgb = case(name, color_range)
    frame, stride, _ = pack(planes, layout, pad, np.random.default_rng(pad))
    h, w = planes[0].shape
    errors = {}
    for rotation in (0, 90, 180, 270):
        for resize, bound in (("nearest", NEAREST_BOUND), ("bilinear", BILINEAR_BOUND)):
            out_size = (224, 160) if rotation == 90 else (224, 224)
            cfg = FrameConfig(width=w, height=h, layout=layout, row_stride=stride,
                              rotation=rotation, output_size=out_size, resize=resize,
                              color_range=color_range)
            conv = FrameConverter(cfg)
            out = conv(frame, out=conv.new_output())
            err = pixel_error(out, reference(rgb, rotation, out_size, resize))
            errors[(rotation, resize)] = err
            assert err <= bound, (rotation, resize, err * 255)
    assert max(errors.values()) > 0  # the comparison is not vacuous


@pytest.mark.parametrize("resize", ["nearest", "bilinear"])
def test_nhwc_and_bgr_output(resize):
    planes, rgb = case("china.jpg", "full")
    frame, _, _ = pack(planes, "nv21", 0, np.random.default_rng(0))
    h, w = planes[0].shape
    ref = reference(rgb, 90, (192, 256), resize)
    bound = NEAREST_BOUND if resize == "nearest" else BILINEAR_BOUND
    base = dict(width=w, height=h, rotation=90, output_size=(192, 256), resize=resize)
    nhwc = FrameConverter(FrameConfig(**base, output_layout="nhwc"))
    out = nhwc(frame, out=nhwc.new_output())
    assert out.shape == (1, 192, 256, 3)
    assert pixel_error(out, ref, "nhwc") <= bound
    bgr = FrameConverter(FrameConfig(**base, channel_order="bgr"))  # mean/std stay R, G, B
    out_bgr = bgr(frame)
    assert pixel_error(out_bgr[:, ::-1], ref) <= bound


@pytest.mark.parametrize("resize", ["nearest", "bilinear"])
@pytest.mark.parametrize("output_layout", ["nchw", "nhwc"])
def test_uint8_output(resize, output_layout):
    planes, rgb = case("flower.jpg", "video")
    frame, stride, _ = pack(planes, "i420", 8, np.random.default_rng(1))
    h, w = planes[0].shape
    conv = FrameConverter(FrameConfig(width=w, height=h, layout="i420", row_stride=stride,
                                      rotation=270, resize=resize, color_range="video",
                                      output_layout=output_layout, output_dtype="uint8"))
    out = conv(frame, out=conv.new_output())
    assert out.dtype == np.uint8
    hwc = out[0].transpose(1, 2, 0) if output_layout == "nchw" else out[0]
    want = np.round(reference(rgb, 270, (224, 224), resize) * 255)
    diff = np.abs(hwc.astype(np.float64) - want)
    assert diff.max() <= 1
    assert (diff > 0).mean() < 0.001


@pytest.mark.parametrize("layout", ["rgb", "bgr"])
@pytest.mark.parametrize("resize", ["nearest", "bilinear"])
def test_packed_rgb_input(layout, resize):
    rgb = photo("flower.jpg")
    h, w = rgb.shape[:2]
    padded = np.zeros((h, w + 5, 3), dtype=np.uint8)  # rows padded by 15 bytes
    padded[:, :w] = rgb if layout == "rgb" else rgb[..., ::-1]
    view = padded[:, :w]
    conv = FrameConverter(FrameConfig(width=w, height=h, layout=layout, row_stride=(w + 5) * 3,
                                      rotation=180, output_size=(200, 240), resize=resize))
    ref = reference(rgb, 180, (200, 240), resize)
    out = conv(view, out=conv.new_output())
    assert pixel_error(out, ref) <= NEAREST_BOUND  # no colour conversion: exact up to float32
    assert np.array_equal(conv(padded.tobytes()), out)  # same frame as one buffer


def test_android_planes_match_whole_frame():
    """Image.getPlanes()-style input: short last rows, U and V overlapping views of VU."""
    planes, _ = case("china.jpg", "full")
    frame, stride, c_stride = pack(planes, "nv21", 16, np.random.default_rng(2))
    h, w = planes[0].shape
    conv = FrameConverter(FrameConfig(width=w, height=h, layout="nv21", row_stride=stride,
                                      rotation=90, resize="bilinear"))
    buf = np.frombuffer(frame, dtype=np.uint8)
    y = buf[: (h - 1) * stride + w]  # Android leaves off the last row's padding
    vu = buf[h * stride: h * stride + (h // 2 - 1) * c_stride + w - 1]  # V plane buffer
    u = buf[h * stride + 1: h * stride + (h // 2 - 1) * c_stride + w]  # U plane buffer
    want = conv(frame)
    assert np.array_equal(conv.convert_planes(y, u, vu), want)
    short = np.frombuffer(frame[: conv.frame_nbytes - (c_stride - w)], dtype=np.uint8)
    assert np.array_equal(conv(short), want)  # one buffer without the last row's padding
