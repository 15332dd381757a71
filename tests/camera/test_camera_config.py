"""FrameConfig parses strings, fills in derived geometry and round-trips through JSON."""

from __future__ import annotations

import json

from mobilize.camera import ColorRange, FrameConfig, Layout, OutputLayout, Resize


def test_strings_parse_to_enums():
    cfg = FrameConfig(width=1920, height=1080, layout="NV12", resize="bilinear",
                      color_range="video", output_layout="nhwc", output_size=[192, 256])
    assert cfg.layout is Layout.NV12 and cfg.resize is Resize.BILINEAR
    assert cfg.color_range is ColorRange.VIDEO and cfg.output_layout is OutputLayout.NHWC
    assert cfg.output_size == (192, 256) and cfg.output_shape == (1, 192, 256, 3)


def test_json_round_trip():
    cfg = FrameConfig(width=1280, height=720, layout="i420", row_stride=1344, rotation=270,
                      crop_size=(600, 600), output_size=(256, 256), mean=(0.5, 0.5, 0.5))
    again = FrameConfig(**json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and hash(again) == hash(cfg)


def test_derived_geometry():
    cfg = FrameConfig(width=1920, height=1080, layout="i420", row_stride=2048, rotation=90,
                      output_size=(224, 160))
    assert cfg.stride == 2048 and cfg.chroma_stride == 1024
    assert cfg.frame_nbytes == 2048 * 1080 + 2 * 1024 * 540
    assert cfg.rotated_size == (1920, 1080)
    # largest centred region with the output's 224:160 aspect: 1512 x 1080
    assert cfg.crop_box == ((1920 - 1512) // 2, 0, 1512, 1080)
    assert FrameConfig(width=640, height=480, crop="none").crop_box == (0, 0, 480, 640)
    assert FrameConfig(width=640, height=480, layout="bgr").frame_nbytes == 640 * 480 * 3


def test_asdict_and_replace_see_only_the_fields():
    import dataclasses

    cfg = FrameConfig(width=640, height=480, rotation=90)
    assert FrameConfig(**dataclasses.asdict(cfg)) == cfg
    turned = dataclasses.replace(cfg, rotation=0)
    assert turned.rotated_size == (480, 640) and cfg.rotated_size == (640, 480)
