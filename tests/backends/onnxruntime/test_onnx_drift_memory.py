"""The per-layer drift of a static int8 file is computed one sample at a time (#40 item 13: tune peaked at 7.5 GB
on a sentence encoder: ONNX Runtime's collect_activations keeps every activation of every sample of both models),
with the same figures as ONNX Runtime's own qdq_loss_debug chain."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mobilize.backends.onnxruntime import drift, quant


def _pair(tmp_path, width: int = 32):
    """A small float ONNX model (two convs) as the quantizer sees it, and its static int8 QDQ twin."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("w1", (8, 3, 3, 3)), ("w2", (8, 8, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["y"], name="relu2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, width, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, width, width])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "f.onnx"))
    pre = drift.preprocessed_float(tmp_path / "f.onnx", tmp_path / "pre.onnx")
    xs = [rng.standard_normal((1, 3, width, width)).astype(np.float32) for _ in range(8)]
    quant.quantize_static_qdq(pre, tmp_path / "q.onnx", quant.BatchFeed(onnx.load(str(pre)), [[x] for x in xs]),
                              quant.StaticOptions(), 1)
    return pre, tmp_path / "q.onnx", xs


def _augmented(tmp_path, pre, qdq):
    from onnxruntime.quantization.qdq_loss_debug import modify_model_output_intermediate_tensors

    modify_model_output_intermediate_tensors(str(pre), str(tmp_path / "fa.onnx"))
    modify_model_output_intermediate_tensors(str(qdq), str(tmp_path / "qa.onnx"))
    return tmp_path / "fa.onnx", tmp_path / "qa.onnx"


def test_streamed_errors_equal_onnx_runtimes_chain(tmp_path):
    from onnxruntime.quantization.qdq_loss_debug import (collect_activations, compute_activation_error,
                                                         create_activation_matching)

    pre, qdq, xs = _pair(tmp_path)
    fa, qa = _augmented(tmp_path, pre, qdq)
    feeds = [{"x": x} for x in xs]
    matched = create_activation_matching(collect_activations(str(qa), list(feeds)),
                                         collect_activations(str(fa), list(feeds)))
    want = compute_activation_error({k: v for k, v in matched.items() if v.get("float") is not None})
    got = drift.activation_errors(fa, qa, feeds)
    assert set(got) == set(want) and len(got) >= 2
    for name in want:
        for key in ("qdq_err", "xmodel_err"):
            assert math.isclose(got[name][key], want[name][key], rel_tol=1e-4, abs_tol=1e-3), (name, key)


def test_the_memory_it_holds_does_not_grow_with_the_samples(tmp_path):
    pre, qdq, xs = _pair(tmp_path, width=64)
    fa, qa = _augmented(tmp_path, pre, qdq)

    def peak(n: int) -> int:
        feeds = [{"x": xs[i % len(xs)]} for i in range(n)]
        tracemalloc.start()
        try:
            drift.activation_errors(fa, qa, feeds)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    few, many = peak(2), peak(16)
    assert many < 1.5 * few, (few, many)  # collect_activations: ~8x (every activation of every sample kept)
