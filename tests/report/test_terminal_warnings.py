"""Every WARNING a variant's notes carry in report.json reaches the terminal in full (the table's notes
column shows one note, cut to its width: a delegation WARNING behind a fuse note was hidden)."""

from mobilize.report.terminal import summary_lines

WARNING = ("executorch: WARNING: 1 op outside XNNPACK takes 98% of the measured time: aten.avg_pool2d 98% "
           "(features.pool). Speed-up: have XNNPACK take it or change the model to avoid it")


def test_a_warning_behind_another_note_is_printed_in_full():
    report = {"variants": [{"name": "executorch-fp32", "outcome": "OK", "notes": [
        "fuse: fused 52 Conv-BN (35 with ReLU), 0 Conv-ReLU, 0 Linear-ReLU", WARNING]},
        {"name": "onnx-fp32", "outcome": "OK", "notes": ["onnx: exported with dynamo"]}], "recommended": None}
    lines = summary_lines(report)
    assert f"executorch-fp32: {WARNING}" in lines
    assert not any("onnx: exported with dynamo" in ln for ln in lines)
