"""ONNX files with opsets ONNX Runtime no longer implements are upgraded with onnx's version converter,
checked against the original with onnx's reference evaluator, and noted; an upgrade that cannot be
checked is refused in one line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from mobilize.core.artifact import Artifact
from mobilize.pipeline.build import build, verify_artifact
from mobilize.core.context import Context
from mobilize.core.errors import UnsupportedModelError
from mobilize.pipeline.recipe import load_recipe
from mobilize.runtimes.base import open_session
from mobilize.core.inputs import InputSpec

SHAPE = (1, 3, 16, 16)


def opset6_model(path, is_test: int = 1):
    """Conv -> BatchNormalization(6) -> Relu -> AveragePool(1): "Could not find an implementation" in ONNX Runtime."""
    rng = np.random.default_rng(0)
    weights = {"W": rng.standard_normal((4, 3, 3, 3)), "scale": rng.random(4) + 0.5, "bias": rng.standard_normal(4),
               "mean": rng.standard_normal(4), "var": rng.random(4) + 0.5}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], is_test=is_test),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))]
    inputs += [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in inits]
    graph = helper.make_graph(nodes, "old", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 7, 7])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)], ir_version=3), str(path))
    return {k: torch.from_numpy(v.astype(np.float32)) for k, v in weights.items()}


def expected(weights, x):
    y = torch.nn.functional.conv2d(x, weights["W"])
    y = torch.nn.functional.batch_norm(y, weights["mean"], weights["var"], weights["scale"], weights["bias"], eps=1e-5)
    return torch.nn.functional.avg_pool2d(torch.relu(y), 2)


def test_old_opset_is_upgraded_checked_and_noted(tmp_path):
    weights = opset6_model(tmp_path / "old.onnx")
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0))
    with open_session(Artifact.from_file(tmp_path / "old.onnx"), threads=1) as session:
        [note] = session.notes
        torch.testing.assert_close(session.run([x])[0], expected(weights, x), atol=1e-5, rtol=1e-4)
        session.set_threads(2)  # a new session on the upgraded model, not the file
        torch.testing.assert_close(session.run([x])[0], expected(weights, x), atol=1e-5, rtol=1e-4)
    assert "BatchNormalization(6)" in note and "upgraded opset 6 to 17" in note and "reference evaluator" in note


def test_onnx_recipe_writes_the_upgraded_model(tmp_path):
    weights = opset6_model(tmp_path / "old.onnx")
    ctx = Context(input_specs=[InputSpec(SHAPE)])
    source = Artifact.from_file(tmp_path / "old.onnx")
    [built] = build(source, load_recipe("onnx-fp32"), ctx, tmp_path / "new").artifacts
    assert next(o.version for o in onnx.load(str(built.artifact.path)).opset_import if o.domain == "") == 17
    assert verify_artifact(built, source, ctx).ok
    x = torch.randn(SHAPE)
    with open_session(built.artifact, threads=1) as session:
        assert session.notes == []  # the written file needs no upgrade
        torch.testing.assert_close(session.run([x])[0], expected(weights, x), atol=1e-5, rtol=1e-4)


def test_an_upgrade_that_fails_is_refused_in_one_line(tmp_path):
    opset6_model(tmp_path / "training.onnx", is_test=0)  # training-mode BatchNormalization: no opset-7 form
    with pytest.raises(UnsupportedModelError, match="upgrading opset 6 to 17 failed") as info:
        open_session(Artifact.from_file(tmp_path / "training.onnx"))
    assert "\n" not in str(info.value) and "BatchNormalization(6)" in str(info.value)


def test_an_upgrade_that_changes_the_outputs_is_refused(tmp_path, monkeypatch):
    """The reference-evaluator check can fail: a converter that changed a weight is caught."""
    from onnx import version_converter

    convert = version_converter.convert_version

    def wrong(model, opset):
        upgraded = convert(model, opset)
        bias = next(t for t in upgraded.graph.initializer if t.name == "bias")
        bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + 0.5, "bias"))
        return upgraded

    monkeypatch.setattr(version_converter, "convert_version", wrong)
    opset6_model(tmp_path / "old.onnx")
    with pytest.raises(UnsupportedModelError, match="does not compute the same as the original"):
        open_session(Artifact.from_file(tmp_path / "old.onnx"))
