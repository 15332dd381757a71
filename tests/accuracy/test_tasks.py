"""Accuracy in the model's own task (issue #23 item 5): the guess from the outputs, each task's measure on tiny real
models over scikit-learn's digits, the budget verdict on it, and the user's own --metric."""

from __future__ import annotations

import copy

import pytest
import torch

from mobilize.accuracy import task_measures
from mobilize.accuracy.metrics import compare_outputs
from mobilize.accuracy.tasks import Task, apply_task, guess_task, load_metric, measure_task
from mobilize.accuracy.verify import Policy, judge, judge_task
from mobilize.core.errors import ConfigError, UnsupportedModelError
from mobilize.runtimes.base import flatten_outputs
from tests.task_models import BoxHead, ColumnCtc, DigitEmbedder, DigitSegmenter, SplitBoxHead, digits

XS, YS = digits(64)


def run(model) -> list[list[torch.Tensor]]:
    with torch.no_grad():
        return [[t.float() if t.is_floating_point() else t for t in flatten_outputs(model(x))] for x in XS]


def coarse(model, levels: int):
    """Every weight rounded to a few levels per tensor: a lossy variant, deterministic on every CPU."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                step = p.abs().max() / levels
                p.copy_(torch.round(p / step) * step)
    return model


@pytest.mark.parametrize("model, names, want", [
    (DigitEmbedder, None, Task.EMBEDDING), (SplitBoxHead, ["boxes", "scores", "labels"], Task.DETECTION),
    (ColumnCtc, None, Task.SEQUENCE),
    # a (1,N,4+1+C) box tensor or (1,C,H,W) masks look like hidden states or feature maps: raw unless --task says
    (BoxHead, None, Task.RAW), (DigitSegmenter, None, Task.RAW)])
def test_the_task_is_guessed_from_the_outputs_and_said_so(model, names, want):
    choice = guess_task(run(model().eval()), YS, names)
    assert choice.task == want and not choice.given
    assert choice.describe().startswith(f"task: {want} (guessed from output shape") and "--task to override" in \
        choice.describe()


def test_per_pixel_scores_at_a_fraction_of_the_image_are_guessed_segmentation_and_features_are_not():
    from tests.task_models import DigitSegFormer

    image = [(1, 1, 8, 8)]
    assert guess_task(run(DigitSegmenter().eval()), YS, None, image).task == Task.SEGMENTATION  # full size
    choice = guess_task(run(DigitSegFormer().eval()), YS, None, image)
    assert choice.task == Task.SEGMENTATION and "at 1/2 of the 8x8 input" in choice.why
    torch.manual_seed(0)
    assert guess_task([[torch.randn(1, 150, 32, 32)]], None, None, [(1, 3, 128, 128)]).task == Task.SEGMENTATION
    relu = [[torch.relu(torch.randn(1, 64, 32, 32))]]  # a ReLU's feature map: non-negative, not class scores
    backbone = [[torch.randn(1, 512, 4, 4)]]  # 1/32 of the image, 512 channels
    wrong_size = [[torch.randn(1, 8, 30, 30)]]  # no stride of the image gives 30
    for outs in (relu, backbone, wrong_size):
        assert guess_task(outs, None, None, [(1, 3, 128, 128)]).task == Task.RAW
    assert guess_task(run(DigitSegFormer().eval()), YS).task == Task.RAW  # without the input's shape: not guessed


def test_a_classifier_is_guessed_from_labels_or_its_width_and_a_scalar_is_raw():
    torch.manual_seed(0)
    logits = [[torch.randn(1, 10)] for _ in range(8)]
    assert guess_task(logits, [i % 10 for i in range(8)]).describe() == \
        "task: classification (guessed from output shape (1,10) and labels 0-7; --task to override)"
    assert guess_task(logits).task == Task.CLASSIFICATION
    assert guess_task([[torch.randn(1, 128)] for _ in range(4)]).describe() == \
        "task: embedding (guessed from output shape (1,128); --task to override)"
    assert guess_task([[torch.randn(1, 1)] for _ in range(4)]).task == Task.RAW
    assert guess_task([[torch.randn(1, 4, 20, 12)] for _ in range(4)], names=["mask"]).task == Task.SEGMENTATION


def test_embedding_neighbour_agreement_falls_with_the_error_and_at_chance_when_samples_are_shuffled():
    model = DigitEmbedder().eval()
    ref = run(model)
    same = measure_task(Task.EMBEDDING, ref, ref, YS)
    fine, rough = (measure_task(Task.EMBEDDING, run(coarse(model, n)), ref, YS) for n in (12, 3))
    shuffled = measure_task(Task.EMBEDDING, [ref[(i * 7) % len(ref)] for i in range(len(ref))], ref, YS)
    assert same.value == 100.0 and same.measure == "neighbour recall@5"
    assert 100.0 > fine.value > rough.value > shuffled.value and shuffled.value < 25.0
    assert same.details["knn1_label_accuracy_reference"] > 80.0  # the digits have neighbours of their own class


def test_both_detection_layouts_match_boxes_at_iou_half_and_moved_boxes_match_none():
    packed, split = BoxHead().eval(), SplitBoxHead().eval()
    ref_p, ref_s = run(packed), run(split)
    lossy_p, lossy_s = run(coarse(packed, 3)), run(coarse(split, 3))
    a, b = measure_task(Task.DETECTION, lossy_p, ref_p, None), measure_task(Task.DETECTION, lossy_s, ref_s, None)
    assert 50.0 < a.value < 100.0 and a.value == pytest.approx(b.value)
    assert a.details["boxes_reference"] > 100 and 0 < a.details["matched_score_abs_diff_mean"] < 0.5
    moved = [[torch.cat([s[0][..., :4] + 8.0, s[0][..., 4:]], -1)] for s in ref_p]  # every box off by 8 px
    assert measure_task(Task.DETECTION, moved, ref_p, None).value == 0.0
    assert measure_task(Task.DETECTION, ref_p, ref_p, None).value == 100.0


def test_a_layout_the_task_cannot_read_is_one_clear_error():
    with pytest.raises(UnsupportedModelError, match=r"\(1,N,4\+1\+C\)"):
        measure_task(Task.DETECTION, [[torch.zeros(1, 3)]], [[torch.zeros(1, 3)]], None)


def test_mask_iou_by_hand_and_on_a_segmentation_net():
    ref = torch.zeros(1, 2, 8, 8)
    ref[:, 0] = 1.0  # every pixel class 0
    cand = ref.clone()
    cand[:, 1, :4] = 2.0  # half the pixels turn class 1: IoU 0.5 for class 0, 0 for class 1
    per, extra = task_measures.segmentation([[cand]], [[ref]])
    assert per == [25.0] and extra["pixel_agreement"] == 50.0
    model = DigitSegmenter().eval()
    fine, rough = (measure_task(Task.SEGMENTATION, run(coarse(model, n)), run(model), None) for n in (12, 3))
    assert 100.0 > fine.value > rough.value and fine.details["pixel_agreement"] > fine.value


def test_ctc_greedy_decoding_and_edit_distance():
    steps = torch.full((1, 8, 3), -5.0)
    for t, s in enumerate([0, 1, 1, 0, 1, 2, 2, 0]):
        steps[0, t, s] = 0.0
    assert task_measures.greedy_decode(steps) == [1, 1, 2]
    assert task_measures.edit_distance("kitten", "sitting") == 3
    model = ColumnCtc().eval()
    rough = measure_task(Task.SEQUENCE, run(coarse(model, 3)), run(model), None)
    assert 0.0 < rough.value < 100.0 and rough.details["edit_agreement"] > rough.value


def test_the_budget_follows_the_task_and_names_its_rule_without_top1():
    model = BoxHead().eval()
    ref, lossy = run(model), run(coarse(model, 3))
    c = compare_outputs(lossy, ref, YS)
    assert c.top1_agreement is not None  # compare_outputs alone would read (1,16,7) as classes ...
    apply_task(c, "detection", lossy, ref, YS)
    verdict = judge(c, "quantized", Policy())
    assert c.top1_agreement is None and "top1" not in str(verdict.numbers) and "top-1" not in verdict.reason
    tight = judge_task(verdict, c, Policy(max_drop_points=1.0))
    loose = judge_task(verdict, c, Policy(max_drop_points=60.0))
    assert tight.outcome == "OVER_BUDGET" and tight.rule == "budget-box-drop" and "(rule budget-box-drop)" in tight.reason
    assert loose.outcome == "OK" and "boxes matched at IoU 0.5" in loose.reason
    assert "top-1" not in tight.reason + loose.reason and "top1" not in str(c.to_json())


def test_embeddings_keep_the_cosine_budget_and_report_their_neighbours():
    model = DigitEmbedder().eval()
    ref, lossy = run(model), run(coarse(model, 12))
    c = compare_outputs(lossy, ref, YS)
    apply_task(c, "embedding", lossy, ref, YS)
    verdict = judge_task(judge(c, "quantized"), c, Policy(min_cosine=0.99))
    assert verdict.outcome == "OK" and "mean cosine" in verdict.reason and "neighbour recall@5" in verdict.reason


def test_a_users_metric_is_judged_by_its_drop(tmp_path):
    (tmp_path / "m.py").write_text(  # minus the mean absolute error of the winning class's score, labels required
        "def closeness(outputs, reference_outputs, labels):\n"
        "    assert len(labels) == len(outputs)\n"
        "    return -sum(abs(float(o[0].max() - r[0].max())) for o, r in zip(outputs, reference_outputs)) / len(outputs)\n")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()
    with torch.no_grad():  # a classifier fitted to the digits by ridge regression: real top-1 on real data
        x = torch.cat([torch.cat([s.reshape(1, -1) for s in XS]), torch.ones(len(XS), 1)], 1).double()
        target = torch.nn.functional.one_hot(torch.tensor(YS), 10).double()
        w = torch.linalg.solve(x.T @ x + 0.1 * torch.eye(65, dtype=torch.float64), x.T @ target).float()
        net[1].weight.copy_(w[:-1].T)
        net[1].bias.copy_(w[-1])
    ref, lossy = run(net), run(coarse(net, 6))
    c = compare_outputs(lossy, ref, YS)
    assert c.top1 == 100.0  # the classes hold: top-1 cannot see this loss, the user's measure can
    apply_task(c, "classification", lossy, ref, YS, metric=f"{tmp_path / 'm.py'}:closeness")
    m = c.task_measure
    assert m.measure == "closeness" and m.reference == 0.0 and m.value < -0.01
    tight = judge_task(judge(c, "quantized"), c, Policy(max_drop_points=0.01))
    loose = judge_task(judge(c, "quantized"), c, Policy(max_drop_points=1.0))
    assert tight.outcome == "OVER_BUDGET" and tight.rule == "budget-metric-drop" and "closeness" in tight.reason
    assert loose.outcome == "OK" and "within budget 1" in loose.reason


@pytest.mark.parametrize("spec, message", [("nope.py:f", "--metric file not found"), ("{tmp}/m.py:missing",
                                            "has no function 'missing'"), ("m.py", "is not FILE.py:FUNCTION")])
def test_a_wrong_metric_reference_is_a_config_error(tmp_path, spec, message):
    (tmp_path / "m.py").write_text("def f(outputs, reference_outputs, labels):\n    return 1.0\n")
    with pytest.raises(ConfigError, match=message):
        load_metric(spec.format(tmp=tmp_path))


def test_a_multi_head_face_detector_is_guessed_per_head_not_as_a_classifier():
    """#40 item 13: MTCNN's ONet returns box offsets (1,4), landmarks (1,10) and a face probability (1,2); read as
    a classifier, top-1 flips of the box offsets were printed."""
    torch.manual_seed(0)
    onet = [[torch.randn(1, 4) * 0.1, torch.rand(1, 10), torch.softmax(torch.randn(1, 2), 1)] for _ in range(8)]
    choice = guess_task(onet)
    assert choice.task == Task.RAW, choice.describe()
    assert ("(1,4) regression values; (1,10) regression values; (1,2) class probabilities; every head judged by its "
            "error, not top-1") in choice.describe()
    jittered = [[t + 0.05 * torch.randn_like(t) for t in sample] for sample in onet]
    c = compare_outputs(jittered, onet)
    apply_task(c, choice.task, jittered, onet, None)
    assert c.top1_agreement is None and c.flips == 0  # no flips of box offsets
    # the probability head first: a classifier on it, the other heads by error
    first = guess_task([[s[2], s[0], s[1]] for s in onet])
    assert first.task == Task.CLASSIFICATION and "top-1 on the first head" in first.describe()
