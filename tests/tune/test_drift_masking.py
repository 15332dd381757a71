"""tune's drift report names an attention-mask tensor as the cause when a masking constant (torch.finfo.min) is
quantized (#40 item 13): int8 cannot hold it, and ranked among ordinary layers it went unnamed."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mobilize.accuracy.drift import cause_lines, masking_first
from mobilize.backends.onnxruntime import drift, quant


def _masked_attention(tmp_path):
    """scores = x @ W plus an additive mask of finfo(float32).min on half the keys, then Softmax."""
    rng = np.random.default_rng(0)
    mask = np.zeros((1, 6, 6), np.float32)
    mask[..., 3:] = np.finfo(np.float32).min
    inits = [numpy_helper.from_array(rng.standard_normal((6, 6)).astype(np.float32), "w"),
             numpy_helper.from_array(mask, "mask")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["scores"], name="qk"),
             helper.make_node("Add", ["scores", "mask"], ["masked"], name="add_mask"),
             helper.make_node("Softmax", ["masked"], ["probs"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["probs", "x"], ["y"], name="pv")]
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 6])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "f.onnx"))
    pre = drift.preprocessed_float(tmp_path / "f.onnx", tmp_path / "pre.onnx")
    xs = [rng.standard_normal((1, 6, 6)).astype(np.float32) for _ in range(8)]
    return pre, xs


def test_a_quantized_masking_constant_is_named_as_the_cause(tmp_path):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    pre, xs = _masked_attention(tmp_path)
    # ONNX Runtime's own quantizer, which does not keep the mask path float (mobilize's does)
    quantize_static(str(pre), str(tmp_path / "q.onnx"), quant.BatchFeed(onnx.load(str(pre)), [[x] for x in xs]),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    layers = masking_first(drift.localise(pre, tmp_path / "q.onnx", [{"x": x} for x in xs]))
    assert layers[0].tensor == "masked" and layers[0].float_abs_max > 1e38, [(l.tensor, l.float_abs_max) for l in layers]
    (line,) = cause_lines(layers)
    assert line.startswith("cause: masked holds a masking constant (an additive attention mask")
    assert "add_mask" in line and "rule masking-constant" in line
    assert layers[0].to_json()["masking"] == line.removeprefix("cause: ")
    assert all(l.masking is None for l in layers[1:])


def test_the_tune_report_names_it_too():
    from mobilize.report.tune_html import layer_chart

    rows = [{"tensor": "masked", "op_type": "Add", "drift_sqnr_db": -3.0, "qdq_sqnr_db": 0.0,
             "masking": "masked holds a masking constant (rule masking-constant)"},
            {"tensor": "scores", "op_type": "MatMul", "drift_sqnr_db": 30.0, "qdq_sqnr_db": 40.0}]
    html = layer_chart("onnx-int8", rows)
    assert html.count("cause: masked holds a masking constant (rule masking-constant)") == 1
