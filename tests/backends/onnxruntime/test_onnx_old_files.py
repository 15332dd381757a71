"""ONNX files from older exporters: weights listed as graph inputs (IR version 3) in the .ort file, and a final
Softmax that onnx's opset converter wraps in Flatten/Reshape, kept in float by static int8 (#40 item 13)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mobilize.core.artifact import Artifact
from mobilize.core.context import Context
from mobilize.core.inputs import InputSpec
from mobilize.exporters import EXPORTERS
from mobilize.runtimes.base import open_session

LIGHT_SQUEEZENET = Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx"


def _export(src: Path, tmp_path: Path, name: str, shape: tuple[int, ...], **options) -> Artifact:
    exporter = EXPORTERS.get("onnx")
    return exporter(exporter.Config(**options)).export(Artifact.from_file(src), Context(input_specs=[InputSpec(shape)]),
                                                       tmp_path / name)


def test_an_ir3_file_with_weights_as_inputs_becomes_an_ort_file_that_runs(tmp_path):
    proto = onnx.load(str(LIGHT_SQUEEZENET))
    assert proto.ir_version < 4 and {i.name for i in proto.graph.initializer} & {i.name for i in proto.graph.input}
    art = _export(LIGHT_SQUEEZENET, tmp_path, "mobile", (1, 3, 224, 224), ort_format=True)
    assert art.path.suffix == ".ort"
    with open_session(art, threads=1) as session:  # before: "Required inputs (['fire3/expand1x1_w_0__SHAPE', ...
        (out,) = session.run([np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)])
    assert np.asarray(out).shape == (1, 1000, 1, 1)
    assert any("remove_initializer_from_input" in n for n in art.notes)


def _conv_softmax_opset9(path: Path) -> Path:
    """Conv -> Relu -> GlobalAveragePool -> Softmax(axis=1) at opset 9, as squeezenet1.0 from the ONNX model zoo."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((10, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="pool"),
             helper.make_node("Softmax", ["g"], ["prob"], name="softmax", axis=1)]
    graph = helper.make_graph(nodes, "sq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10, 1, 1])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=4), str(path))
    return path


def test_a_final_softmax_behind_the_opset_converters_reshape_stays_float(tmp_path):
    art = _export(_conv_softmax_opset9(tmp_path / "sq.onnx"), tmp_path, "int8", (1, 3, 16, 16), quantize="static")
    graph = onnx.load(str(art.path)).graph
    producer = {o: n.op_type for n in graph.node for o in n.output}
    assert "QuantizeLinear" in producer.values()  # the Conv is int8
    softmax = next(n for n in graph.node if n.op_type == "Softmax")
    readers = [n.op_type for n in graph.node if softmax.output[0] in n.input]
    assert readers == ["Reshape"] and producer[graph.output[0].name] == "Reshape", (readers, producer)  # no uint8
    assert any("kept the output Softmax (softmax) and the" in n for n in art.notes), art.notes
