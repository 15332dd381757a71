"""``--input NAME=VALUE`` for an ONNX file: an input of rank 0 (Silero VAD's ``sr``) becomes a constant of the value
given, in the input's own element type, in a copy of the file; every variant then builds from a file whose inputs are
tensors to feed (ONNX Runtime's levels, int8 calibrated on the other inputs, OpenVINO), as a PyTorch model's bound
argument does (:mod:`mobilize.sources.bound`).  The copy lives in a cache folder named after the file's content and
the values (:func:`mobilize.sources.bound.bound_file`).
"""

from __future__ import annotations

from typing import Any

from mobilize.core.artifact import Artifact
from mobilize.core.errors import ConfigError, UnsupportedModelError, translate_errors
from mobilize.core.inputs import out_of_range


def bind_inputs(art: Artifact, bound: dict[str, Any]) -> Artifact:
    """A copy of ``art`` with each bound input a constant (checked: the input exists and is of rank 0)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    from mobilize.sources.bound import as_declared, bound_file

    with translate_errors(UnsupportedModelError, f"{art.path} is not a readable ONNX file"):
        model = onnx.load(str(art.path))
    weights = {i.name for i in model.graph.initializer}
    inputs = {i.name: i for i in model.graph.input if i.name not in weights}
    listed = ", ".join(f"{n} {_shape(i)}" for n, i in inputs.items())
    typed = {}
    for name, value in bound.items():
        if name not in inputs:
            raise ConfigError(f"--input {name}=...: {art.path} has no input '{name}'", hint=f"its inputs: {listed}")
        tensor_type = inputs[name].type.tensor_type
        if len(tensor_type.shape.dim) != 0:
            raise ConfigError(f"--input {name}=... gives one value, but input '{name}' of {art.path} has shape "
                              f"{_shape(inputs[name])}", hint="--input fills inputs of rank 0; feed the others with "
                                                              "--data or random inputs of --input_dims")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        kind = "bool" if dtype == np.bool_ else ("float" if dtype.kind == "f" else ("int" if dtype.kind in "iu" else "str"))
        typed[name] = as_declared(name, value, kind)
        problem = out_of_range(typed[name], dtype.name) if kind in ("int", "float") else ""
        if problem:
            raise ConfigError(f"--input {name}={value}: input '{name}' of {art.path} is {dtype.name}, and {problem}",
                              hint=f"give a value {dtype.name} holds")
        model.graph.input.remove(inputs[name])
        model.graph.initializer.append(numpy_helper.from_array(np.array(typed[name], dtype=dtype), name))
    what = ", ".join(f"{k}={v!r}" for k, v in typed.items())
    return bound_file(art, typed, model.SerializeToString(), f"{art.path.name} with {what} made constant(s) of the graph")


def _shape(value_info: Any) -> str:
    dims = value_info.type.tensor_type.shape.dim
    return "(" + ",".join(str(d.dim_value) if d.dim_value > 0 else (d.dim_param or "?") for d in dims) + ")"
