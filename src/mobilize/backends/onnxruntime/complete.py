"""Is an ONNX file whole, its external data included?"""

from __future__ import annotations

from pathlib import Path

from mobilize.core.completeness import HINT
from mobilize.core.errors import UnsupportedModelError, translate_errors


def check_onnx(path: Path) -> None:
    """An .onnx must parse as a whole protobuf with a graph, an opset and outputs, and every tensor it
    keeps in external data files must lie inside them.  (.ort files are ONNX Runtime's own format: left
    to ONNX Runtime.)"""
    if path.suffix.lower() != ".onnx":
        return
    try:
        import onnx
    except ImportError:  # ONNX Runtime reads the file itself and says what is wrong with it
        return
    with translate_errors(UnsupportedModelError, f"reading {path}", hint=HINT,  # DecodeError and friends
                          message=lambda exc: f"{path} is not a valid ONNX model: truncated or corrupt, not a "
                                              f"complete protobuf ({type(exc).__name__})"):
        model = onnx.load(str(path), load_external_data=False)
    if not model.HasField("graph") or not model.graph.output or not model.opset_import:
        missing = [name for name, ok in (("graph", model.HasField("graph")), ("outputs", bool(model.graph.output)),
                                         ("opset", bool(model.opset_import))) if not ok]
        raise UnsupportedModelError(f"{path} is not a valid ONNX model: truncated or corrupt, it has no "
                                    f"{', '.join(missing)}", hint=HINT)
    for tensor in _external_tensors(model.graph):
        info = {e.key: e.value for e in tensor.external_data}
        data_file = path.parent / info.get("location", "")
        if not info.get("location") or not data_file.is_file():
            raise UnsupportedModelError(f"{path}: tensor '{tensor.name}' is stored in {data_file.name or '?'}, "
                                        f"which is missing", hint="keep the external data files beside the .onnx")
        end = int(info.get("offset", 0)) + int(info.get("length", 0))
        if end > data_file.stat().st_size:
            raise UnsupportedModelError(f"{path}: tensor '{tensor.name}' ends at byte {end} of {data_file.name}, "
                                        f"past its end ({data_file.stat().st_size} bytes)", hint=HINT)


def _external_tensors(graph) -> list:
    out = [t for t in graph.initializer if t.data_location == 1]  # TensorProto.EXTERNAL
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                out += _external_tensors(attr.g)
            for g in attr.graphs:
                out += _external_tensors(g)
    return out
