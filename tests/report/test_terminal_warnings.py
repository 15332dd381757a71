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


def test_a_pick_on_random_inputs_or_under_a_guessed_raw_task_says_so_under_the_recommendation():
    """Issue #67: with no --data an int8 file was recommended and the only word of random inputs was a per-row note
    cut short; a guessed raw task let a quantized file be picked with no task measure checked."""
    from mobilize.compare.recommend import pick_caveats
    from mobilize.report.results import VariantResult

    picked = VariantResult("executorch-int8", kind="quantized",
                           notes=["data: no data source: using 8 seeded random inputs (give --data for real samples)"])
    task = {"name": "raw", "given": False, "why": "output shape (1,256,50)", "text": "task: raw (guessed ...)"}
    rec = {"name": "executorch-int8", "reason": "fastest OK variant [rule race-separated]", "rule": "race-separated",
           "tied": [], **pick_caveats(picked, task, None)}
    report = {"recommended": rec, "task": task, "reference_variant": "eager-fp32", "variants": [
        {"name": "executorch-int8", "outcome": "OK", "latency_ms_p50": 1.5, "notes": picked.notes}]}
    lines = summary_lines(report)
    at = lines.index(next(ln for ln in lines if ln.startswith("recommended: executorch-int8")))
    assert lines[at + 2].startswith("  inputs: judged on seeded random inputs (no --data)")
    assert "its int8 scales were calibrated on random values too" in lines[at + 2]
    assert lines[at + 3].startswith("  not checked: the task was guessed raw (output shape (1,256,50))")
    # with data, a float pick or a task given: nothing to add
    float_pick = VariantResult("onnx-fp32", kind="float")
    assert pick_caveats(float_pick, task, "speech.npz") == {}
    assert pick_caveats(picked, {**task, "given": True}, "speech.npz") == {}
