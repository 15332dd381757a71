"""``bench --frames`` checks each file's infer stage inside the frame loop against the same file alone, paired round
by round, with the control that tells a pause between frames from the frame path's input (issue 41 item 6)."""

from __future__ import annotations

from mobilize.bench.harness import BenchConfig
from mobilize.camera.bench import FRAME_ROUNDS, bench_frames, format_stages
from mobilize.camera.frames import parse_frame_spec
from mobilize.core.inputs import InputSpec


def test_the_frame_report_compares_the_infer_stage_with_the_file_alone():
    spec = InputSpec((1, 3, 32, 32))
    report = bench_frames("zoo:toy_classifier", BenchConfig(warmup=1, iterations=10, threads=1, input_specs=(spec,)),
                          spec=parse_frame_spec("nv21:64x48"), echo=lambda line: None)
    check = report["frames"]["infer_check"]
    assert check["rounds"] == FRAME_ROUNDS and check["rule"].startswith("frame-infer-")
    assert check["infer_ms_p50"] > 0 and check["alone_ms_p50"] > 0 and check["control_ms_p50"] > 0
    # the interval decides, not the ratio alone (a loaded machine leaves it unresolved: within None)
    expected = {"frame-infer-within": True, "frame-infer-faster": True, "frame-infer-unresolved": None,
                "frame-infer-pause": False, "frame-infer-input": False}
    assert check["within"] is expected[check["rule"]], check
    text = format_stages(report)
    assert "infer inside the loop" in text and f"[rule {check['rule']}]" in text
    assert ("note: " in text) == (not check["within"])
