"""References and shapes that make a measure vacuous (issue #40 items 1, 8, 9): a subnormal reference is
degenerate and no export is blamed for its scale; a one-value output is judged by its error and its decision, not
by a cosine that is only its sign; a near-empty map by an absolute tolerance on its range, not by a cosine that
reads 0 on every empty sample."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mobilize.accuracy.metrics import compare_outputs
from mobilize.accuracy.tasks import without_classes
from mobilize.accuracy.verify import DEFAULT_POLICY, Kind, Policy, against_both, assess, degenerate_reference, judge
from mobilize.core.outcome import Outcome

TINY = torch.finfo(torch.float32).tiny  # float32's smallest normal, 1.18e-38


class SubnormalNet(nn.Module):
    """A tiny conv net whose last Linear is scaled by 1e-41: logits of ~1e-42, subnormal as random-init MobileViT's (~1e-40)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(8, 10)
        with torch.no_grad():
            self.fc.weight.mul_(1e-41)
            self.fc.bias.mul_(1e-41)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


def subnormal_outputs(n: int = 32):
    model = SubnormalNet().eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        return [[model(torch.randn(1, 3, 16, 16, generator=g))] for _ in range(n)]


def test_a_subnormal_reference_is_vacuous_and_no_export_is_blamed():
    ref = subnormal_outputs()
    rms = float(torch.cat([s[0] for s in ref]).double().pow(2).mean().sqrt())
    assert 0 < rms < TINY  # the outputs really are subnormal
    warning = degenerate_reference(ref)
    assert warning is not None and "subnormal" in warning and "rule vacuous-subnormal-reference" in warning
    assert "1.18e-38" in warning and "fix:" in warning
    flushed = [[torch.zeros_like(t)] for (t,) in ref]  # XNNPACK flushes subnormals to 0
    imprecise = [[(t.double() * 1.05).float()] for (t,) in ref]  # another rounding at this scale
    for cand in (flushed, imprecise):
        c = compare_outputs(cand, ref)
        fidelity = judge(c, Kind.FLOAT)
        assert fidelity.outcome == Outcome.MISMATCH  # the numbers alone would blame the export ...
        v = assess(c, Kind.FLOAT, fidelity=fidelity, reference_warning=warning).verdict
        assert v.outcome == Outcome.VACUOUS and v.rule == "vacuous-subnormal-reference", v.reason  # ... not anymore
        assert "subnormal" in v.reason and v.reference_warning == warning
        assert v.fidelity["outcome"] == "VACUOUS" and "MISMATCH" not in v.reason  # neither half blames the file
    q = compare_outputs(flushed, ref)
    assert assess(q, Kind.QUANTIZED, reference_warning=warning).verdict.outcome == Outcome.VACUOUS
    nan = [[torch.full_like(t, float("nan"))] for (t,) in ref]  # a broken file is still broken
    assert assess(compare_outputs(nan, ref), Kind.FLOAT, reference_warning=warning).verdict.outcome == \
        Outcome.MISMATCH


def test_a_reference_at_the_edge_of_float32_precision_is_degenerate_and_small_normal_ones_are_not():
    g = torch.Generator().manual_seed(0)
    base = [[torch.randn(1, 10, generator=g)] for _ in range(16)]
    near = [[t * 1e-37] for (t,) in base]  # normal, but an engine flushing subnormals loses 10% of it
    assert "subnormal" in (degenerate_reference(near) or "")
    assert degenerate_reference([[t * 1e-19] for (t,) in base]) is None  # README: logits of 1e-19 judge like 1
    assert degenerate_reference(base, Policy(degenerate_min_rms=10.0)) is not None  # the threshold is the Policy's


def test_an_all_zero_reference_keeps_its_own_reason():
    ref = [[torch.zeros(1, 10)] for _ in range(4)]
    assert "is exactly 0" in degenerate_reference(ref) and "rule vacuous-reference" in degenerate_reference(ref)


# -- one value per sample ------------------------------------------------------------------------------
def probabilities(n: int = 32, seed: int = 0, shape=(1, 1)):
    g = torch.Generator().manual_seed(seed)
    return [[torch.sigmoid(3 * torch.randn(shape, generator=g))] for _ in range(n)]


@pytest.mark.parametrize("shape", [(1, 1), (1,)])
def test_a_one_value_output_is_judged_by_its_error_and_decisions_not_by_cosine(shape):
    ref = probabilities(shape=shape)
    g = torch.Generator().manual_seed(5)
    off = [[(t + 0.15 * torch.randn(t.shape, generator=g)).clamp(1e-3, 1)] for (t,) in ref]  # a speech prob 0.15 off
    c = compare_outputs(off, ref)
    assert c.cosine_mean == 1.0  # the cosine of one positive value is 1: it passes anything
    v = assess(c, Kind.QUANTIZED).verdict
    assert v.outcome == Outcome.OVER_BUDGET and v.rule.startswith("budget-one-value"), v.reason
    assert "decision" in v.reason and "at 0.5" in v.reason and f"(rule {v.rule})" in v.reason
    assert v.numbers["decision_threshold"] == 0.5 and v.numbers["one_value_relative_error"] > 0.05
    faithful = [[t * (1 + 1e-7)] for (t,) in ref]
    ok = assess(compare_outputs(faithful, ref), Kind.FLOAT).verdict
    assert ok.outcome == Outcome.OK and "rule budget-one-value" in ok.reason and "mean cosine" not in ok.reason


def test_a_one_value_logit_decides_at_zero_and_flipped_decisions_are_over_budget():
    g = torch.Generator().manual_seed(0)
    ref = [[torch.randn(1, 1, generator=g) * 4] for _ in range(32)]
    near = sorted(range(32), key=lambda i: float(ref[i][0].abs()))[:4]
    flipped = [[-t if i in near else t.clone()] for i, (t,) in enumerate(ref)]  # the 4 nearest 0 flip
    v = assess(compare_outputs(flipped, ref), Kind.QUANTIZED, Policy(one_value_max_relative_error=10.0)).verdict
    assert v.outcome == Outcome.OVER_BUDGET and v.rule == "budget-one-value-decision", v.reason
    assert v.numbers["decision_threshold"] == 0.0 and v.numbers["decision_agreement"] == pytest.approx(28 / 32)
    assert "at 0 (a logit)" in v.reason


def test_a_one_value_mismatch_names_its_error_and_flipped_decisions_not_a_cosine():
    """A one-value file below the SQNR floor (MISMATCH) says what decided it in its own terms (#48 item 5): its error
    and the decisions it flipped, in the reason and in the numbers the err % column reads - never "mean cosine"."""
    from mobilize.report.terminal import measure_text

    ref = probabilities(shape=(1, 1))
    g = torch.Generator().manual_seed(7)
    off = [[torch.rand(t.shape, generator=g).clamp(1e-3, 1)] for (t,) in ref]  # a fp32 file that computes noise
    v = assess(compare_outputs(off, ref), Kind.FLOAT).verdict
    assert v.outcome == Outcome.MISMATCH and v.rule == "float-sqnr", v.reason
    assert "mean cosine" not in v.reason and "flipped" in v.reason and "max error" in v.reason
    flips = v.numbers["decision_flips"]
    assert flips > 0 and f"({flips} flipped)" in v.reason
    column = measure_text({}, variant={"verdict": v.to_json()})
    assert column == f"{100 * v.numbers['one_value_relative_error']:.2f}"  # the error, not a cosine of 1.0000


# -- near-empty maps -----------------------------------------------------------------------------------
def text_maps(n: int = 16):
    """A text detector's probability map on photos without text: one sample has a few pixels, the rest are 0."""
    maps = [torch.zeros(1, 1, 32, 32) for _ in range(n)]
    maps[3][0, 0, 10, 10:14] = torch.tensor([0.9, 0.7, 0.8, 0.6])
    return [[m] for m in maps]


def test_a_near_empty_map_is_judged_by_an_absolute_tolerance_on_its_range():
    ref = text_maps()
    g = torch.Generator().manual_seed(0)
    close = [[m + 1e-7 * torch.randn(m.shape, generator=g)] for (m,) in ref]  # a float file: 1e-7 differences
    c = compare_outputs(close, ref)
    assert c.cosine_mean < 0.99 and c.sqnr_db > 100  # every empty sample's cosine reads 0
    v = assess(c, Kind.FLOAT).verdict
    assert v.outcome == Outcome.OK and "rule budget-near-zero-map" in v.reason, v.reason
    assert v.numbers["reference_zero_share"] >= DEFAULT_POLICY.near_zero_map_min_zero_share
    far = [[m + 0.2 * (m == 0).float() * (torch.rand(m.shape, generator=g) > 0.999)] for (m,) in ref]
    bad = assess(without_classes(compare_outputs(far, ref), "raw"), Kind.CHANGED).verdict  # 0.2 where it is empty
    assert bad.outcome == Outcome.OVER_BUDGET and bad.rule == "budget-near-zero-map", bad.reason
    assert "of the output's scale 1 (a probability)" in bad.reason


def test_a_map_with_content_keeps_the_cosine_budget():
    g = torch.Generator().manual_seed(0)
    ref = [[torch.rand(1, 1, 8, 8, generator=g)] for _ in range(8)]
    v = assess(compare_outputs(ref, ref), Kind.FLOAT).verdict
    assert v.outcome == Outcome.OK and "mean cosine" in v.reason and "near-zero" not in v.reason


def test_against_both_without_a_subnormal_warning_still_blames_a_broken_file():
    ref = [[torch.randn(1, 10)] for _ in range(8)]
    off = judge(compare_outputs([[t * 1.5] for (t,) in ref], ref), Kind.FLOAT)
    assert against_both(off, off, degenerate_reference([[torch.zeros(1, 10)]] * 4)).outcome == Outcome.MISMATCH


def test_optimize_keeps_a_float_file_of_a_subnormal_reference_and_says_why_it_is_vacuous(run_cli, tmp_path):
    """optimize, like compare, calls the numbers of a subnormal reference VACUOUS (#48 item 12): it exited 2 "artifacts
    do not match ... (nothing was written)" on a correct fp32 file."""
    import inspect

    (tmp_path / "net.py").write_text("import torch\nfrom torch import nn\n\n" + inspect.getsource(SubnormalNet))
    code, out, err = run_cli("optimize", f"{tmp_path / 'net.py'}:SubnormalNet", "--recipe", "executorch-fp32",
                             "--input_dims", "1,3,16,16", "-o", tmp_path / "o")
    assert code == 0, err
    assert "subnormal" in out + err and "vacuous-subnormal-reference" in out + err
    assert list((tmp_path / "o").rglob("*.pte"))


def test_a_vacuous_verdict_never_reads_as_within_budget():
    """#67 item 6: a file equal to a subnormal reference met the cosine budget's number, which proves nothing: the
    verdict's words must not say "within budget" under VACUOUS."""
    ref = subnormal_outputs()
    warning = degenerate_reference(ref)
    c = compare_outputs(ref, ref)
    v = assess(c, Kind.FLOAT, fidelity=judge(c, Kind.FLOAT), reference_warning=warning).verdict
    assert v.outcome == Outcome.VACUOUS, v.reason
    assert "within budget" not in v.reason and "not a pass" in v.reason, v.reason
    plain = assess(compare_outputs(ref, ref), Kind.FLOAT).verdict  # the same words stay where the verdict is OK
    assert plain.outcome == Outcome.OK and "within budget" in plain.reason
