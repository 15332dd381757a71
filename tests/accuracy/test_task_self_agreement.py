"""Task measures that are right on the reference itself (issue #40 item 7, #39 item 1): the float model scores
exactly 100% against itself on every task measure; detection reads both YOLO layouts and says which, matches
zero-area boxes, and refuses in one line an output in neither layout."""

from __future__ import annotations

import pytest
import torch

from mobilize.accuracy.metrics import compare_outputs
from mobilize.accuracy.tasks import Task, measure_task, reference_task
from mobilize.core.errors import UnsupportedModelError, UserError
from tests.accuracy.test_tasks import YS, coarse, run
from tests.task_models import BoxHead, ColumnCtc, DigitEmbedder, DigitSegmenter, SplitBoxHead, YoloHead


def with_zero_area_boxes(samples):
    """BoxHead's rows with every third box squashed to a vertical line (x2 = x1) and every fifth inverted."""
    out = []
    for (t,) in samples:
        t = t.clone()
        t[..., ::3, 2] = t[..., ::3, 0]
        t[..., ::5, 2] = t[..., ::5, 0] - 1.0
        out.append([t])
    return out


def transposed(samples):
    """The same heads as YOLOv8 gives them: (1,4+C,N), boxes as cx,cy,w,h, class probabilities, no objectness."""
    out = []
    for (t,) in samples:
        centre, size = (t[..., :2] + t[..., 2:4]) / 2, (t[..., 2:4] - t[..., :2]).clamp(min=0)
        out.append([torch.cat([centre, size, t[..., 5:].softmax(-1) * t[..., 4:5]], -1).transpose(1, 2)])
    return out


def references():
    """Per task, the float outputs of a model of that task on the digits (detection: every layout)."""
    rows = with_zero_area_boxes(run(BoxHead().eval()))
    return {
        Task.CLASSIFICATION: [[torch.randn(1, 10, generator=torch.Generator().manual_seed(i))] for i in range(64)],
        Task.EMBEDDING: run(DigitEmbedder().eval()),
        Task.DETECTION: [rows, transposed(rows), run(SplitBoxHead().eval()), run(YoloHead().eval())],
        Task.SEGMENTATION: run(DigitSegmenter().eval()),
        Task.SEQUENCE: run(ColumnCtc().eval()),
        Task.RAW: run(DigitSegmenter().eval()),
    }


@pytest.mark.parametrize("task", list(Task))
def test_the_reference_scores_exactly_100_against_itself_on_every_task_measure(task):
    if task == Task.GENERATION:  # a decoder's measure reads logits over token ids: the same ids, the same logits
        import numpy as np

        from mobilize.accuracy.generation import measure_tokens

        ids = np.random.default_rng(0).integers(0, 16, size=(4, 12))
        logits = np.random.default_rng(1).normal(size=(4, 12, 16))
        m = measure_tokens(logits, logits, ids)
        assert (m.top1_agreement, m.ppl_increase_percent) == (1.0, 0.0)
        return
    refs = references()
    assert set(refs) | {Task.GENERATION} == set(Task)  # a new task gets its self-agreement checked here
    for ref in refs[task] if task == Task.DETECTION else [refs[task]]:
        c = compare_outputs(ref, ref, YS)
        m = measure_task(task, ref, ref, YS)
        if m is None:  # classification and raw: top-1 agreement and SQNR say it
            assert task in (Task.CLASSIFICATION, Task.RAW)
            assert c.sqnr_db == float("inf") and c.cosine_mean == 1.0
            assert task != Task.CLASSIFICATION or (c.top1_agreement == 1.0 and c.flips == 0)
            continue
        assert m.value == 100.0 and m.drop == 0.0 and set(m.per_sample) == {100.0}, (task, m.details)


def test_zero_area_boxes_are_among_the_float_boxes_and_match_themselves():
    rows = with_zero_area_boxes(run(BoxHead().eval()))
    yolo = run(YoloHead().eval())
    for ref in (rows, yolo, transposed(rows)):
        m = measure_task(Task.DETECTION, ref, ref, None)
        assert m.value == 100.0 and m.details["boxes_matched"] == m.details["boxes_reference"] > 100
    t = torch.cat([s[0] for s in yolo])
    assert bool((t[:, 2:4] == 0).any(1).sum() > 100)  # the YOLOv8-style head gives zero-area boxes


def test_both_yolo_layouts_are_read_and_said_and_agree_with_each_other():
    model = BoxHead().eval()
    ref, lossy = run(model), run(coarse(model, 3))
    by_rows = measure_task(Task.DETECTION, lossy, ref, None)
    by_columns = measure_task(Task.DETECTION, transposed(lossy), transposed(ref), None)
    assert by_rows.details["layout"].startswith("read as (1,N,4+1+C) rows")
    assert by_columns.details["layout"].startswith("read as (1,4+C,N) columns (YOLOv8)")
    assert 50.0 < by_rows.value < 100.0 and 50.0 < by_columns.value < 100.0
    moved = [[t + torch.tensor([8.0, 8.0, 0, 0, 0, 0]).reshape(1, 6, 1)] for (t,) in transposed(ref)]
    assert measure_task(Task.DETECTION, moved, transposed(ref), None).value == 0.0  # every centre off by 8 px
    choice = reference_task("detection", None, run(YoloHead().eval()))
    assert choice.describe() == ("task: detection (given with --task); read as (1,4+C,N) columns (YOLOv8): "
                                 "cx,cy,w,h, class scores (score: their max)")
    assert choice.to_json()["reading"].startswith("read as (1,4+C,N)")


@pytest.mark.parametrize("shape", [(1, 5, 30, 30), (1, 3), (1, 4, 4), (1,), ()])
def test_an_output_in_neither_layout_is_refused_in_one_line_naming_the_layouts(shape):
    ref = [[torch.rand(shape)] for _ in range(4)]
    with pytest.raises(UnsupportedModelError) as info:
        reference_task("detection", None, ref)
    text = str(info.value)
    assert isinstance(info.value, UserError) and "\n" not in text
    assert "(1,N,4+1+C)" in text and "(1,4+C,N)" in text and "(1,N,4)" in text and "--task raw" in text
    assert f"the output is {'x'.join(map(str, shape)) or 'a scalar'}" in text
