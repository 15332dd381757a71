"""Issue #48 item 2: detection is measured over all boxes, not averaged per image.  A detector that finds none of
the float model's 12 boxes scored "boxes matched 90.6%" because the 58 images where neither model finds a box
each counted 100%; and a budget of 10 points called that file OK."""

from __future__ import annotations

import pytest
import torch

from mobilize.accuracy.metrics import compare_outputs
from mobilize.accuracy.task_measures import average_precision
from mobilize.accuracy.tasks import Task, apply_task, measure_task
from mobilize.accuracy.verify import Policy, judge, judge_task
from tests.task_models import BoxHead, digits

IMAGES, WITH_BOXES = 64, range(0, 64, 11)  # 6 images with 2 boxes each: 12 float boxes, 58 empty images


def head(boxes: dict[int, list[tuple[list[float], float]]]) -> list[list[torch.Tensor]]:
    """(1,16,4+1+2) rows per image: the given (xyxy, score) boxes, every other anchor scored 0.05 (no box)."""
    torch.manual_seed(0)
    out = []
    for i in range(IMAGES):
        rows = torch.cat([torch.rand(16, 2) * 4, torch.rand(16, 2) * 4 + 4, torch.full((16, 1), 0.05),
                          torch.rand(16, 2)], 1)
        for k, (xyxy, score) in enumerate(boxes.get(i, [])):
            rows[k, :4], rows[k, 4], rows[k, 5:] = torch.tensor(xyxy), score, torch.tensor([1.0, 0.0])
        out.append([rows[None]])
    return out


FLOAT = {i: [([1.0, 1.0, 5.0, 5.0], 0.9), ([4.0, 4.0, 8.0, 8.0], 0.8)] for i in WITH_BOXES}
MISSES = {i: [([1.0, 1.0, 5.0, 5.0], 0.2), ([4.0, 4.0, 8.0, 8.0], 0.1)] for i in WITH_BOXES}  # scored below 0.25
FALSE = {**FLOAT, **{i + 1: [([2.0, 2.0, 6.0, 6.0], 0.9)] * 2 for i in WITH_BOXES}}  # 12 boxes in empty images


def test_a_detector_that_misses_every_float_box_scores_zero_and_is_over_budget():
    reference, missing = head(FLOAT), head(MISSES)
    m = measure_task(Task.DETECTION, missing, reference, None)
    assert sum(m.per_sample) / IMAGES == pytest.approx(90.625)  # the old per-image average
    assert m.value == 0.0 and m.details["box_recall"] == 0.0 and m.details["box_map50"] == 0.0
    assert m.details["boxes_reference"] == 12 and m.details["boxes_candidate"] == 0
    low, high = m.drop_ci()
    assert low > 0.0 and m.to_json()["drop_significant"] is True  # not a tie
    c = compare_outputs(missing, reference, None)
    apply_task(c, "detection", missing, reference, None)
    verdict = judge_task(judge(c, "quantized", Policy()), c, Policy(max_drop_points=10.0))
    assert verdict.outcome != "OK" and verdict.rule == "budget-box-drop", verdict.reason


def test_false_positives_in_images_without_a_float_box_count_against_precision():
    m = measure_task(Task.DETECTION, head(FALSE), head(FLOAT), None)
    assert m.details["box_recall"] == 100.0 and m.details["box_precision"] == 50.0
    assert m.value == pytest.approx(100 * 2 * 12 / 36)  # F1 over all boxes: 2 x 12 matched / (12 + 24)
    same = measure_task(Task.DETECTION, head(FLOAT), head(FLOAT), None)
    assert same.value == 100.0 and same.details["box_map50"] == 100.0 and same.drop_ci() == (0.0, 0.0)


def test_map_ranks_by_score_and_a_real_head_keeps_its_pooled_figures():
    truth = [(torch.tensor([[0.0, 0.0, 4.0, 4.0], [5.0, 5.0, 8.0, 8.0]]), torch.tensor([0, 0]))]
    good_first = [(torch.tensor([[0.0, 0.0, 4.0, 4.0], [9.0, 9.0, 12.0, 12.0]]), torch.tensor([0.9, 0.5]),
                   torch.tensor([0, 0]))]
    false_first = [(good_first[0][0], torch.tensor([0.5, 0.9]), torch.tensor([0, 0]))]
    assert average_precision(good_first, truth) == 50.0 and average_precision(false_first, truth) == 25.0
    xs, _ = digits(32)
    model = BoxHead().eval()
    with torch.no_grad():
        ref = [[model(x)] for x in xs]
    shifted = [[torch.cat([t[..., :4] + 0.6, t[..., 4:]], -1)] for (t,) in ref]  # every box moved 0.6 px
    m = measure_task(Task.DETECTION, shifted, ref, None)
    d = m.details
    assert 0.0 < m.value < 100.0 and m.value == pytest.approx(200.0 * d["boxes_matched"] /
                                                              (d["boxes_reference"] + d["boxes_candidate"]))
    assert 0.0 < d["box_map50"] <= 100.0 and d["box_recall"] == pytest.approx(d["box_precision"])
