"""``mobilize bench --frames``: frame -> input -> inference -> top-k, each stage timed; bad frame
specs and frame files are one-line errors (exit 2).  A tiny model and small frames: ~1 s each."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mobilize.bench.harness import BenchConfig
from mobilize.camera import FrameConverter
from mobilize.camera.bench import bench_frames
from mobilize.camera.frames import frame_config_for, load_frames, parse_frame_spec
from mobilize.core.inputs import InputSpec, MemoryFormat
from mobilize.zoo import ZOO

MODEL = "zoo:toy_classifier"
DIMS = ("--input_dims", "1,3,64,64")
QUICK = BenchConfig(warmup=1, iterations=4, threads=1)
quiet = lambda line: None  # noqa: E731


def expected_top5(spec_text: str, input_spec: InputSpec) -> list[int]:
    """The model on the first synthetic frame, converted by the Python converter, outside the bench."""
    cfg = frame_config_for(parse_frame_spec(spec_text), input_spec)
    x = torch.from_numpy(FrameConverter(cfg)(load_frames(cfg, None)[0][0]))
    if cfg.output_layout == "nhwc":
        x = x.permute(0, 3, 1, 2)
    with torch.no_grad():
        scores = ZOO.get("toy_classifier").build()(x).reshape(-1)
    return torch.topk(scores, 5).indices.tolist()


@pytest.mark.parametrize("memory_format", [MemoryFormat.CONTIGUOUS, MemoryFormat.CHANNELS_LAST])
def test_stages_shares_and_answer(memory_format):
    spec = InputSpec((1, 3, 64, 64), "float", memory_format)
    report = bench_frames(MODEL, BenchConfig(**{**QUICK.__dict__, "input_specs": (spec,)}),
                          spec=parse_frame_spec("nv21:160x120:90"), echo=quiet)
    frames = report["frames"]
    assert list(frames["stages"]) == ["convert", "feed", "infer", "answer"]
    assert sum(s["share_pct"] for s in frames["stages"].values()) == pytest.approx(100.0)
    assert all(s["latency_ms_p50"] > 0 for s in frames["stages"].values())
    assert report["latency_ms_p50"] >= frames["stages"]["infer"]["latency_ms_p50"]
    # Layout once: a channels-last input is written NHWC by the converter, and the runtime reads that buffer.
    assert frames["output_layout"] == ("nhwc" if memory_format == MemoryFormat.CHANNELS_LAST else "nchw")
    assert frames["feed_shares_buffer"] is True
    assert [c for c, _ in frames["first_frame_top_k"]] == expected_top5("nv21:160x120:90", spec)
    assert "synthetic moving pattern" in report["input_source"]


def test_cli_prints_stage_table_and_reads_a_frame_folder(run_cli, tmp_path):
    cfg = frame_config_for(parse_frame_spec("i420:96x64"), InputSpec((1, 3, 64, 64)))
    frames, _ = load_frames(cfg, None)
    (tmp_path / "frames").mkdir()
    for i in range(2):
        frames[i].tofile(tmp_path / "frames" / f"{i}.i420")
    code, out, err = run_cli("bench", MODEL, *DIMS, "--frames", "i420:96x64", "--frames-from", tmp_path / "frames",
                             "--iter", "3", "--warmup", "0", "--threads", "1", "--frame-resize", "bilinear",
                             "--json", tmp_path / "r.json")
    assert code == 0, err
    assert "Main run finished. Microseconds per iter:" in out
    for stage in ("convert", "feed", "infer", "answer"):
        assert f"  {stage} " in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["frames"]["source"].startswith("2 frame(s) from") and report["frames"]["resize"] == "bilinear"


@pytest.mark.parametrize("argv, message", [
    (("--frames", "nv21:1921x1080"), "even width and height"),
    (("--frames", "yuyv:640x480"), "unknown layout 'yuyv'"),
    (("--frames", "nv21:640x480:45"), "rotation must be 0, 90, 180 or 270"),
    (("--frames", "nv21-640-480"), "is not LAYOUT:WIDTHxHEIGHT[:ROTATION]"),
    (("--frames-from", "x"), "--frames-from needs --frames"),
    (("--frames", "nv21:32x32"), "larger than the crop"),
    (("--frames", "nv21:640x480", "--use_bundled_input", "0"), "--frames makes the model's input"),
    (("--frames", "nv21:640x480", "--profile"), "--profile times the model alone"),
    (("--frames", "nv21:640x480", "--native"), "--native runs TorchScript (.pt), lite (.ptl) and ExecuTorch"),
])
def test_bad_frame_specs_are_one_line_errors(run_cli, argv, message):
    code, out, err = run_cli("bench", MODEL, *DIMS, *argv, "--iter", "1")
    assert code == 2, (out, err)
    assert err.startswith("mobilize: error:") and message in err and "Traceback" not in err


def test_frame_file_of_the_wrong_size(run_cli, tmp_path):
    (tmp_path / "f.nv21").write_bytes(np.zeros(1000, np.uint8).tobytes())
    code, _, err = run_cli("bench", MODEL, *DIMS, "--frames", "nv21:640x480", "--frames-from", tmp_path / "f.nv21")
    assert code == 2 and "not a whole number of 640x480 nv21 frames (460800 bytes each)" in err


def test_normalization_comes_from_the_manifest_when_it_says(tmp_path):
    from types import SimpleNamespace

    from mobilize.camera import IMAGENET_MEAN, IMAGENET_STD
    from mobilize.camera.bench import normalization

    model = tmp_path / "m.pte"
    model.write_bytes(b"x")
    assert normalization(SimpleNamespace(path=model))[:2] == (IMAGENET_MEAN, IMAGENET_STD)
    (tmp_path / "m.pte.manifest.json").write_text(json.dumps(
        {"input_normalization": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}}))
    mean, std, where = normalization(SimpleNamespace(path=model))
    assert mean == (0.5, 0.5, 0.5) and std == (0.25, 0.25, 0.25) and "m.pte.manifest.json" in where


@pytest.mark.slow
def test_litert_file_gets_nhwc_straight_from_the_converter(run_cli, tmp_path):
    """A LiteRT file takes NHWC: the converter writes NHWC and the interpreter reads that very buffer
    (no transpose after the converter), and the answer is the one an NCHW-fed eager model gives."""
    code, _, err = run_cli("optimize", MODEL, *DIMS, "--recipe", "litert-fp32", "-o", tmp_path)
    assert code == 0, err
    report = bench_frames(str(next(tmp_path.glob("*.tflite"))), QUICK, spec=parse_frame_spec("nv21:160x120:90"),
                          echo=quiet)
    frames = report["frames"]
    assert frames["output_layout"] == "nhwc" and frames["feed_shares_buffer"] is True
    assert [c for c, _ in frames["first_frame_top_k"]] == expected_top5("nv21:160x120:90", InputSpec((1, 3, 64, 64)))
