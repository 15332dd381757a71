"""ONNX Runtime's error text becomes a sentence that says what failed and what to do (#40 item 13): the raw
C++ status text ("Axis 1 is out-of-range") stays in the log and the exception's cause, not in notes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mobilize.backends.onnxruntime import quant
from mobilize.backends.onnxruntime.messages import explain
from mobilize.core.artifact import Artifact
from mobilize.core.errors import UnsupportedModelError
from mobilize.runtimes.base import open_session


def _fixed_reshape(path):
    """A file that reshapes its input of any size to (2, 3): it fails when run on another size."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [2, 3])
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="flat")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "m"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_a_failing_node_is_named_with_what_to_do(tmp_path, capfd):
    path = _fixed_reshape(tmp_path / "bad.onnx")
    with open_session(Artifact.from_file(path), threads=1) as session:
        with pytest.raises(UnsupportedModelError) as info:
            session.run([np.ones((1, 4), np.float32)])
    text = str(info.value)
    assert text.startswith("ONNX Runtime's Reshape kernel failed at node 'flat': a shape written into the file")
    assert "--input_dims" in text and "[ONNXRuntimeError]" not in text and "requested shape" not in text
    assert "requested shape" in str(info.value.__cause__)  # the runtime's own words: the cause (--debug) ...
    assert "requested shape" in capfd.readouterr().err  # ... and the log


@pytest.mark.parametrize("raw,fragment", [
    ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: x for the following indices\n"
     " index: 1 Got: 3 Expected: 4\n Please fix either the inputs/outputs or the model.",
     "input 'x' has 3 in dimension 1 where the file expects 4; give --input_dims"),
    ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Unexpected input data type. Actual: (tensor(double)) , expected: "
     "(tensor(float))", "an input is double where the file expects float"),
    ("Required inputs (['w1', 'b1']) are missing from input feed (['x']).", "remove_initializer_from_input.py"),
    ("Non-zero status code returned while running Reshape node. Name:'r' Status Message: The input tensor cannot "
     "be reshaped to the requested shape. Input shape:{1,9}, requested shape:{1,4}",
     "Reshape kernel failed at node 'r': a shape written into the file does not fit this input size"),
])
def test_known_runtime_texts(raw, fragment):
    assert fragment in explain(raw)
    assert explain("some other line") is None


def test_a_captured_runtime_line_becomes_a_note_in_words(capfd):
    notes: list[str] = []
    quant._add_notes(notes, ["Non-zero status code returned while running Softmax node. Name:'n65' Status Message: "
                             "Axis 1 is out-of-range"])
    assert len(notes) == 1 and notes[0].startswith("onnxruntime: ONNX Runtime's Softmax kernel failed at node 'n65': "
                                                   "axis 1 is past the rank"), notes
    assert "out-of-range" not in notes[0] and "Axis 1 is out-of-range" in capfd.readouterr().err
