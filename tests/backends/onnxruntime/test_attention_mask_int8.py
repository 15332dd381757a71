"""Static int8 on a BERT-style encoder whose attention adds a ``finfo.min`` mask: the calibrated range of the
masked scores (~3.4e38 wide) would give every Softmax input one uint8 step of ~1e36, so every attention weight
collapsed (cosine 0.34 against float, seen on a sentence encoder).  The masking constant is found in the
calibrated ranges and the mask path is kept in float, with a note naming the tensors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

ort = pytest.importorskip("onnxruntime")


class MaskedEncoder(nn.Module):
    """One self-attention block with the additive mask transformers builds: (1 - mask) * finfo(float32).min."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.heads, self.dim = heads, dim
        self.qkv, self.out, self.ff = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        with torch.no_grad():  # peaked attention, as a trained encoder has: a collapsed softmax shows
            self.qkv.weight[: 2 * dim] *= 4.0

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        scores = scores + (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        return self.ff(torch.relu(self.out(y)))


def _samples(n: int, t: int = 12, dim: int = 32):
    gen = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        mask = torch.ones(1, t)
        mask[0, t - 1 - i % 5:] = 0.0  # padded positions
        out.append([torch.randn(1, t, dim, generator=gen), mask])
    return out


def _int8_cosines(tmp_path, monkeypatch, detect: bool) -> tuple[list[float], list[str], object]:
    import onnx

    from mobilize.backends.onnxruntime import quant
    from mobilize.core.target import host_target

    if not detect:  # the counterfactual: what static int8 does with the mask in its ranges
        monkeypatch.setattr(quant, "MASK_MAGNITUDE", float("inf"))
    model, samples = MaskedEncoder().eval(), _samples(24)
    src, dst = tmp_path / "enc.onnx", tmp_path / f"enc-int8-{detect}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(samples[0]), str(src), dynamo=False, input_names=["x", "mask"], opset_version=17)
    # reduce_range as the exporter sets it for this machine: without VNNI, full 8-bit weights saturate (0.96 there)
    notes = quant.quantize_static_qdq(src, dst, quant.BatchFeed(onnx.load(str(src)), samples[:16]),
                                      quant.StaticOptions(reduce_range=host_target().reduce_range), batch=1)
    float_s = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    int8_s = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    cos = []
    for x, mask in samples[16:]:
        feed = {"x": x.numpy(), "mask": mask.numpy()}
        a, b = float_s.run(None, feed)[0].ravel(), int8_s.run(None, feed)[0].ravel()
        cos.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    return cos, notes, onnx.load(str(dst))


def test_a_masking_constant_is_kept_out_of_int8(tmp_path, monkeypatch):
    collapsed, _, _ = _int8_cosines(tmp_path, monkeypatch, detect=False)
    monkeypatch.undo()
    kept, notes, int8 = _int8_cosines(tmp_path, monkeypatch, detect=True)
    assert float(np.mean(collapsed)) < 0.9, collapsed  # the mask in the ranges breaks the file
    assert float(np.mean(kept)) >= 0.99, (kept, notes)  # the cosine budget's default
    assert any("masking constant" in n and "kept in float" in n and "Softmax" in n for n in notes), notes
    assert any(n.op_type == "QuantizeLinear" for n in int8.graph.node), "the rest of the model is still int8"


def test_a_large_activation_that_is_no_mask_is_quantized_as_usual():
    """A ConvNet with unnormalized weights (activations ~1e9, as onnx's light_squeezenet test model has) reaches a
    Softmax only through convs and pools: no masking constant, nothing kept in float on that account."""
    from onnx import TensorProto, helper

    from mobilize.backends.onnxruntime.quant import masking_nodes

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"), helper.make_node("Softmax", ["f"], ["y"], name="sm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])

    class Range:
        def __init__(self, reach):
            self.range_value = (np.float32(-reach), np.float32(reach))

    proto = helper.make_model(graph)
    assert masking_nodes(proto, {"c": Range(9e9), "r": Range(9e9), "p": Range(9e9)}) == ([], "")
    # the same reach on a tensor added to the scores right before the Softmax is a mask
    mask = [helper.make_node("Add", ["s", "m"], ["a"], name="add_mask"),
            helper.make_node("Softmax", ["a"], ["z"], name="attn")]
    graph = helper.make_graph(mask, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in "sm"],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])])
    kept, note = masking_nodes(helper.make_model(graph), {"m": Range(3.4e38), "a": Range(3.4e38)})
    assert kept == ["add_mask", "attn"] and "masking constant" in note


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_a_histogram_calibration_that_cannot_bin_the_mask_says_so_and_names_minmax(tmp_path, method):
    """Entropy and percentile calibration histogram every tensor; numpy cannot bin the mask's -3.4e38 range ("Too many
    bins for data range", raw, seen from tune): refused in one line naming the cause and the calibration that works
    (#48 item 12)."""
    import onnx

    from mobilize.backends.onnxruntime import quant
    from mobilize.core.errors import UnsupportedByEngineError

    model, samples = MaskedEncoder().eval(), _samples(8)
    src = tmp_path / "enc.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(samples[0]), str(src), dynamo=False, input_names=["x", "mask"], opset_version=17)
    with pytest.raises(UnsupportedByEngineError, match="cannot bin one of them") as info:
        quant.quantize_static_qdq(src, tmp_path / "int8.onnx", quant.BatchFeed(onnx.load(str(src)), samples),
                                  quant.StaticOptions(calibration=method), batch=1)
    assert "minmax calibration takes this model" in info.value.hint
