"""Issue #48 item 6: an OCR detector's probability map on photos without text is almost all near 0 (a sigmoid
gives 1e-6, never exactly 0), and a float engine's logistic kernel errs by ~1e-7 absolute whatever the value: its
float files read 30-45 dB SQNR, MISMATCH under the 60 dB float floor, while their masks are the same.  Two causes:
the near-zero-map rule counted only exact zeros, and the SQNR floor is judged before any shape rule."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from mobilize.accuracy.metrics import compare_outputs
from mobilize.accuracy.shapes import judge_near_zero_floor, near_empty_map
from mobilize.accuracy.verify import Kind, Verdict, assess, judge_budget
from mobilize.core.outcome import Outcome


class TextMap(nn.Module):
    """A DBNet-style probability head: conv, ReLU, conv, sigmoid; its logits sit near -12 on photos without text."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1))
        with torch.no_grad():
            self.body[2].bias.fill_(-12.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.body(x))


def photos(n: int = 8) -> list[torch.Tensor]:
    """32x32 crops of scikit-learn's two sample photos (no text in them), in [0, 1]."""
    from sklearn.datasets import load_sample_images

    images = [torch.tensor(im, dtype=torch.float32).permute(2, 0, 1) / 255 for im in load_sample_images().images]
    return [images[k % 2][None, :, 40 * k:40 * k + 32, 60 * k:60 * k + 32].contiguous() for k in range(n)]


def float_maps():
    model = TextMap().eval()
    with torch.no_grad():
        ref = [[model(x)] for x in photos()]
    g = torch.Generator().manual_seed(0)
    kernel = [[m + 1.2e-7 * torch.randn(m.shape, generator=g)] for (m,) in ref]  # a logistic kernel's 1e-7 error
    return ref, kernel


def test_a_sigmoid_map_near_zero_is_a_near_empty_map_and_its_float_floor_reads_its_scale():
    ref, kernel = float_maps()
    c = compare_outputs(kernel, ref)
    assert c.first.zero_share == 0.0 and c.sqnr_db < 60  # no exact zero; the float floor fails on rounding
    assert c.first.near_zero_share == 1.0 and c.first.empty_samples == 8 and c.first.scale == 1.0
    assert near_empty_map(c.first)
    floor = judge_near_zero_floor(c.first, "float", 60.0, c.sqnr_db, {})
    assert floor.outcome == Outcome.OK and floor.rule == "float-near-zero-map", floor.reason
    assert "scale 1 (a probability)" in floor.reason and floor.numbers["error_of_scale_db"] > 120
    budget = judge_budget(floor, cosine=c.cosine_mean, labelled=False, first=c.first)
    assert budget.outcome == Outcome.OK and "(rule budget-near-zero-map)" in budget.reason
    off = [[m + 0.05] for (m,) in ref]  # a file 5% off the probability scale everywhere is still refused
    c_off = compare_outputs(off, ref)
    assert judge_near_zero_floor(c_off.first, "float", 60.0, c_off.sqnr_db, {}) is None
    q = judge_near_zero_floor(c_off.first, "quantized", 8.0, c_off.sqnr_db, {})
    assert q.outcome == Outcome.OK and judge_budget(q, cosine=c_off.cosine_mean, labelled=False,
                                                    first=c_off.first).rule == "budget-near-zero-map"


def test_a_classifiers_probabilities_are_no_near_empty_map():
    torch.manual_seed(0)
    logits = [torch.randn(1, 2000) for _ in range(8)]
    for t in logits:
        t[0, 0] = 40.0  # confident: 1999 of 2000 probabilities below 1e-3, but no row is empty
    probs = [[torch.softmax(t, 1)] for t in logits]
    first = compare_outputs(probs, probs).first
    assert first.near_zero_share >= 0.999 and first.empty_samples == 0 and not near_empty_map(first)


def test_a_float_file_of_a_near_empty_map_is_ok_end_to_end():
    ref, kernel = float_maps()
    v = assess(compare_outputs(kernel, ref), Kind.FLOAT).verdict
    assert v.outcome == Outcome.OK and "float-near-zero-map" in v.reason, v.reason


def test_the_onnx_runtime_file_of_a_text_map_keeps_its_mask():
    ort = pytest.importorskip("onnxruntime")
    model, xs = TextMap().eval(), photos()
    buf = io.BytesIO()
    torch.onnx.export(model, (xs[0],), buf, dynamo=False)
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    with torch.no_grad():
        ref = [[model(x)] for x in xs]
    got = [[torch.from_numpy(session.run(None, {name: x.numpy()})[0])] for x in xs]
    c = compare_outputs(got, ref)
    assert near_empty_map(c.first) and c.first.max_abs < 1e-5  # whatever SQNR this CPU's logistic kernel gives
    verdict = Verdict(Outcome.OK, "float-sqnr", "") if c.sqnr_db >= 60 else \
        judge_near_zero_floor(c.first, "float", 60.0, c.sqnr_db, {})
    assert verdict is not None and verdict.outcome == Outcome.OK
