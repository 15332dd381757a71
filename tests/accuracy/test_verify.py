"""The verify core: verdicts name their rule; metrics survive any scale; flips near ties are not failures;
intervals shrink with more samples."""

from __future__ import annotations

import math

import pytest
import torch

from mobilize.accuracy.metrics import compare_outputs
from mobilize.accuracy.stats import paired_drop_ci, ratio_ci
from mobilize.accuracy.verify import DEFAULT_POLICY, Kind, Policy, assess, judge, judge_budget, verify_close
from mobilize.core.outcome import Outcome


def logits(n=200, classes=10, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(1, classes, generator=g) * scale] for _ in range(n)]


def test_float_rounding_is_ok_and_names_the_rule():
    ref = logits()
    cand = [[t * (1 + 1e-7)] for (t,) in ref]
    v = judge(compare_outputs(cand, ref), Kind.FLOAT)
    assert v.outcome == Outcome.OK and v.rule == "float-sqnr" and "rule float-sqnr" in v.reason


@pytest.mark.parametrize("scale", [1e-19, 1.0, 1e12])
def test_metrics_do_not_depend_on_the_output_scale(scale):
    ref = logits(scale=scale)
    cand = [[t * (1 + 1e-4)] for (t,) in ref]
    c = compare_outputs(cand, ref)
    assert c.sqnr_db == pytest.approx(80.0, abs=0.1)
    assert c.cosine_mean == pytest.approx(1.0, abs=1e-9)
    assert judge(c, Kind.FLOAT).outcome == Outcome.OK


def test_logits_that_tie_on_purpose_pass_in_fp32_with_flips_counted():
    """Every sample's top two logits are within 1e-6: rounding-sized noise flips many top-1s."""
    g = torch.Generator().manual_seed(1)
    ref, cand = [], []
    for _ in range(100):
        base = torch.randn(1, 5, generator=g)
        base[0, 1] = base[0, 0] = base.max() + 1.0
        base[0, 1] += 1e-6
        ref.append([base])
        cand.append([base + torch.randn(1, 5, generator=g) * 1e-6])
    c = compare_outputs(cand, ref)
    v = judge(c, Kind.FLOAT)
    assert c.flips > 10 and c.near_tie_flips == c.flips and c.hard_flips == 0
    assert v.outcome == Outcome.OK and f"{c.flips} top-1 flip(s)" in v.reason and "near tie" in v.reason


def test_perturbed_weights_are_still_a_mismatch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)).eval()
    xs = [torch.randn(1, 16) for _ in range(64)]
    with torch.no_grad():
        ref = [[model(x)] for x in xs]
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01 * p.abs().mean())
        cand = [[model(x)] for x in xs]
    v = judge(compare_outputs(cand, ref), Kind.FLOAT)
    assert v.outcome == Outcome.MISMATCH and v.rule == "float-sqnr" and "< 60 dB" in v.reason


def test_quantized_near_chance_is_a_mismatch_but_int8_noise_is_not():
    ref = logits(n=300, seed=2)
    noisy = [[t + 0.05 * torch.randn_like(t)] for (t,) in ref]
    assert judge(compare_outputs(noisy, ref), Kind.QUANTIZED).outcome == Outcome.OK
    shuffled = [ref[(i * 7 + 3) % len(ref)] for i in range(len(ref))]  # answers of other samples
    assert judge(compare_outputs(shuffled, ref), Kind.QUANTIZED).rule == "quantized-sqnr"
    swapped = []  # every clear answer moved to the runner-up: small error, but hard flips everywhere
    for (t,) in ref:
        top = t.topk(2, dim=1)
        d = 0.7 * float(top.values[0, 0] - top.values[0, 1])
        c = t.clone()
        c[0, top.indices[0, 0]] -= d
        c[0, top.indices[0, 1]] += d
        swapped.append([c])
    comp = compare_outputs(swapped, ref)
    v = judge(comp, Kind.QUANTIZED)
    assert comp.hard_flips == len(ref) and comp.sqnr_db > DEFAULT_POLICY.quantized_min_sqnr_db
    assert v.outcome == Outcome.MISMATCH and v.rule == "quantized-agreement" and "near chance" in v.reason


def test_nan_and_shape_are_named():
    ref = logits(n=3)
    nan = [[torch.full_like(t, math.nan)] for (t,) in ref]
    assert judge(compare_outputs(nan, ref), Kind.FLOAT).rule == "finite"
    wide = [[torch.zeros(1, 11)] for _ in ref]
    v = judge(compare_outputs(wide, ref), Kind.FLOAT)
    assert v.outcome == Outcome.MISMATCH and v.rule == "shape"


def test_tuple_and_dict_outputs_are_compared_output_by_output():
    ref = [[torch.ones(1, 4), torch.ones(1, 8)] for _ in range(4)]
    cand = [[torch.ones(1, 4), torch.ones(1, 8) * 2] for _ in range(4)]
    c = compare_outputs(cand, ref, names=["logits", "embedding"])
    assert [o.name for o in c.outputs] == ["logits", "embedding"]
    assert c.outputs[0].sqnr_db == math.inf and c.outputs[1].sqnr_db == pytest.approx(0.0)
    assert judge(c, Kind.FLOAT).outcome == Outcome.MISMATCH


def test_budget_turns_a_working_variant_over_budget_and_names_the_rule():
    ok = judge(compare_outputs(logits(n=20), logits(n=20)), Kind.QUANTIZED)
    over = judge_budget(ok, drop_points=1.5, drop_ci=(0.5, 2.5), labelled=True)
    assert over.outcome == Outcome.OVER_BUDGET and over.rule == "budget-top1-drop" and "0.5" in over.reason
    assert judge_budget(ok, drop_points=0.5, labelled=True).outcome == Outcome.OK
    cos = judge_budget(ok, cosine=0.95, labelled=False)
    assert cos.outcome == Outcome.OVER_BUDGET and cos.rule == "budget-cosine"
    assert judge_budget(ok, cosine=0.995, labelled=False, policy=DEFAULT_POLICY).ok



def test_a_changed_model_has_no_sqnr_floor_but_near_chance_is_still_broken():
    """A pruned, fine-tuned model (Kind.CHANGED) moves its logits far (low SQNR) yet keeps its answers: OK under
    rule changed-model and the budget decides; answers near chance are MISMATCH (rule changed-agreement)."""
    ref = logits(n=40, seed=2)
    moved = [[t * 0.3 + 0.5 * torch.sign(t)] for (t,) in ref]  # same argmax, SQNR of a few dB
    c = compare_outputs(moved, ref)
    assert c.sqnr_db < DEFAULT_POLICY.quantized_min_sqnr_db and c.top1_agreement == 1.0
    assert judge(c, Kind.QUANTIZED).outcome == Outcome.MISMATCH
    ok = judge(c, Kind.CHANGED)
    assert ok.outcome == Outcome.OK and ok.rule == "changed-model" and "budget decides" in ok.reason
    noise = judge(compare_outputs(logits(n=40, seed=3), ref), Kind.CHANGED)
    assert noise.outcome == Outcome.MISMATCH and noise.rule == "changed-agreement"

def test_assess_decides_the_budget_on_labels_else_cosine_and_keeps_the_figures():
    """One function assembles the budget for compare, tune, optimize and arm64: labelled -> top-1 drop with its
    paired interval and McNemar p; unlabelled -> mean cosine; a degenerate reference -> VACUOUS."""
    ref = logits(n=40, seed=1)
    labels = [int(r[0].argmax()) for r in ref]

    def flipped(t):  # the runner-up becomes the answer, just
        t = t.clone()
        second = int(t.topk(2).indices[0, 1])
        t[0, second] = t.max() + 0.05
        return t

    cand = [[flipped(t)] if i < 4 else [t] for i, (t,) in enumerate(ref)]  # 4 of 40 answers changed
    c = compare_outputs(cand, ref, labels)
    ref_correct = [True] * 40
    labelled = assess(c, Kind.QUANTIZED, Policy(max_drop_points=5.0), reference_correct=ref_correct)
    assert labelled.drop_points == pytest.approx(10.0) and labelled.drop_ci[0] < 10.0 < labelled.drop_ci[1]
    assert labelled.verdict.outcome == Outcome.OVER_BUDGET and labelled.verdict.rule == "budget-top1-drop"
    figures = labelled.accuracy_json()
    assert figures["top1_reference"] == 100.0 and figures["top1_drop_significant"] and 0 < figures["top1_drop_mcnemar_p"] < 1
    loose = assess(c, Kind.QUANTIZED, Policy(max_drop_points=20.0), reference_correct=ref_correct)
    assert loose.verdict.outcome == Outcome.OK and "within budget 20" in loose.verdict.reason
    unlabelled = assess(c, Kind.QUANTIZED)
    assert unlabelled.drop_points is None and unlabelled.verdict.ok and "mean cosine" in unlabelled.verdict.reason
    strict = assess(c, Kind.QUANTIZED, Policy(min_cosine=1.0))
    assert strict.verdict.outcome == Outcome.OVER_BUDGET and strict.verdict.rule == "budget-cosine"
    vacuous = assess(compare_outputs(ref, ref), Kind.FLOAT, reference_warning="WARNING: constant (rule x)")
    assert vacuous.verdict.outcome == Outcome.VACUOUS and vacuous.verdict.rule == "vacuous-reference"


def test_intervals_shrink_as_samples_grow():
    def width(n):
        ref = [True] * n
        cand = [i % 20 != 0 for i in range(n)]  # the candidate misses 5% of the samples
        lo, hi = paired_drop_ci(ref, cand)
        assert lo <= 5.0 <= hi
        return hi - lo
    assert width(100) > 1.8 * width(1000) > 0


def test_speed_ratio_tie_and_significance():
    assert not ratio_ci([10.0, 12.0, 9.0, 11.0], [10.5, 10.0, 11.0, 10.0]).significant  # noise: a tie
    assert ratio_ci([10.0, 10.3, 9.8, 10.1], [5.0, 5.2, 4.9, 5.1]).significant


def test_allclose_rule():
    assert verify_close([torch.ones(3)], [torch.ones(3) + 1e-6], atol=1e-4, rtol=0).ok
    v = verify_close([torch.ones(3)], [torch.ones(3) + 1e-3], atol=1e-4, rtol=0)
    assert v.outcome == Outcome.MISMATCH and v.rule == "allclose"


# -- what a verdict is measured against; degenerate references ------------------------------------------
def test_a_faithful_file_outside_the_budget_against_float_is_over_budget():
    from mobilize.accuracy.verify import FIDELITY, QUALITY, against_both

    ref = logits(n=64)
    faithful = judge(compare_outputs(ref, ref), Kind.QUANTIZED)  # the file equals its prepared int8 model
    noisy = [[t + torch.randn(t.shape, generator=torch.Generator().manual_seed(i)) * 0.3] for i, (t,) in enumerate(ref)]
    c = compare_outputs(noisy, ref)
    quality = judge_budget(judge(c, Kind.QUANTIZED), cosine=c.cosine_mean, labelled=False)
    v = against_both(faithful, quality)
    assert faithful.ok and quality.outcome == Outcome.OVER_BUDGET
    assert v.outcome == Outcome.OVER_BUDGET and v.rule == "budget-cosine"
    assert v.fidelity["against"] == FIDELITY and v.fidelity["outcome"] == "OK"
    assert v.quality["against"] == QUALITY and v.quality["numbers"]["cosine"] == pytest.approx(c.cosine_mean)
    assert v.reason.startswith(f"quality vs {QUALITY}: OVER_BUDGET") and f"fidelity vs {FIDELITY}" in v.reason
    assert v.to_json()["fidelity"]["rule"] == "quantized-sqnr"


def test_an_unfaithful_file_is_a_mismatch_whatever_its_quality():
    from mobilize.accuracy.verify import against_both

    ref = logits(n=16)
    off = judge(compare_outputs([[t * 1.1] for (t,) in ref], ref), Kind.FLOAT)
    good = judge(compare_outputs(ref, ref), Kind.FLOAT)
    v = against_both(off, good)
    assert v.outcome == Outcome.MISMATCH and v.rule == "float-sqnr" and v.reason.startswith("fidelity vs")


@pytest.mark.parametrize("make,what", [
    (lambda i, g: torch.zeros(1, 10), "is exactly 0"),
    (lambda i, g: torch.full((1, 10), 3.0) + 1e-6 * torch.randn(1, 10, generator=g), "does not depend on the input"),
    (lambda i, g: torch.randn(1, 10, generator=g) + torch.tensor([[9.0] + [0.0] * 9]), "one top-1 class for 100%"),
])
def test_degenerate_references_make_verdicts_vacuous(make, what):
    from mobilize.accuracy.verify import against_both, degenerate_reference

    g = torch.Generator().manual_seed(0)
    ref = [[make(i, g)] for i in range(DEFAULT_POLICY.degenerate_min_samples)]
    warning = degenerate_reference(ref)
    assert warning and what in warning and "rule vacuous-reference" in warning
    assert "train or load weights; random init gives near-constant outputs" in warning
    v = against_both(None, judge(compare_outputs(ref, ref), Kind.FLOAT), warning)
    assert v.outcome == Outcome.VACUOUS and v.rule == "vacuous-reference" and not v.ok
    assert v.reference_warning == warning and "quality vs the float model" in v.reason


def test_a_reference_that_depends_on_its_input_is_not_degenerate():
    from mobilize.accuracy.verify import degenerate_reference

    assert degenerate_reference(logits(n=64)) is None
    few = [[torch.randn(1, 10) + torch.tensor([[9.0] + [0.0] * 9])] for _ in range(4)]
    assert degenerate_reference(few) is None  # four samples say nothing about a top-1 share
    assert degenerate_reference(few, Policy(degenerate_min_samples=4)) is not None


def test_a_mismatch_names_its_cosine():
    """A MISMATCH says how far off in the figure a reader knows too (issue #40: MISMATCH verdicts carried no
    cosine)."""
    import numpy as np

    from mobilize.accuracy.metrics import compare_outputs
    from mobilize.accuracy.verify import judge

    rng = np.random.default_rng(0)
    reference = [[rng.normal(size=(1, 10)).astype(np.float32)] for _ in range(4)]
    candidate = [[r[0] + 0.5 * rng.normal(size=r[0].shape).astype(np.float32)] for r in reference]
    verdict = judge(compare_outputs(candidate, reference), "float")
    assert verdict.outcome == "MISMATCH" and "mean cosine 0." in verdict.reason
    assert 0 < verdict.numbers["cosine"] < 1
