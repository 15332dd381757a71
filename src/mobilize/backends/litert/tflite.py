"""LiteRT (TensorFlow Lite) ``.tflite`` facts: ops, tensor types, input layout, and what XNNPACK took.

Read from the flatbuffer itself (``ai_edge_litert``'s generated schema; nothing is run) and, for
the delegation, from an interpreter after the XNNPACK delegate was applied: each ``DELEGATE`` node
replaces the ops between its inputs and outputs, so walking back from its outputs to its inputs
finds exactly the ops it took; the rest run on LiteRT's builtin kernels.  The exporter records
the input layout it chose in the file's metadata (``mobilize.input_layouts``), so a bare
``.tflite`` still says whether it takes NHWC.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

from mobilize.profile.core import WARN_BELOW_PERCENT

FILE_IDENTIFIER = b"TFL3"
LAYOUT_METADATA = "mobilize.input_layouts"
"""Metadata entry (JSON list, one of ``nchw``/``nhwc`` per input) written by mobilize's litert exporter."""
HEAVY_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "TRANSPOSE_CONV",
                       "CONV_3D"})
"""Ops that carry the compute of conv nets and transformers: any of them on builtin kernels is flagged."""
INTEGER_TYPES = frozenset({"INT8", "UINT8", "INT16", "INT4"})


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str
    """Flatbuffer type name: FLOAT32, INT8, FLOAT16 ..."""
    quantized: bool
    """Carries quantization scales (an int8/int16 tensor with a scale and zero point)."""


@dataclasses.dataclass(frozen=True)
class TfliteFacts:
    op_counts: dict[str, int]
    """Ops of the main subgraph by builtin name."""
    integer_ops: int
    """Ops of the main subgraph whose first input is an integer (int8/uint8/int16) tensor: int8 compute."""
    float_ops: dict[str, int]
    """Ops (other than QUANTIZE/DEQUANTIZE) whose first input is a float tensor, by name: in an int8 model, the
    float islands between DEQUANTIZE and QUANTIZE."""
    tensor_types: dict[str, int]
    """Every tensor of the main subgraph, by type."""
    weight_types: dict[str, int]
    """Constant tensors (data in the file), by type."""
    quantized_tensors: int
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    input_layouts: tuple[str, ...] | None
    """``nchw``/``nhwc`` per input, as mobilize's exporter recorded it; None for files made elsewhere."""
    metadata: tuple[str, ...]

    @property
    def precision(self) -> str:
        """What the arithmetic runs in, as far as the file says."""
        heavy = sum(n for op, n in self.op_counts.items() if op in HEAVY_OPS)
        int_weights = sum(n for t, n in self.weight_types.items() if t in INTEGER_TYPES)
        if self.integer_ops and self.integer_ops >= max(1, heavy):
            return "int8"
        if int_weights and self.integer_ops:
            return "mixed int8 / float"
        if int_weights:
            return "float32 compute, int8 weights (dynamic range)"
        if self.weight_types.get("FLOAT16"):
            return "float32 compute, float16 weights"
        return "float32"

    def to_json(self) -> dict[str, Any]:
        return {"op_counts": dict(self.op_counts), "integer_ops": self.integer_ops, "float_ops": dict(self.float_ops),
                "tensor_types": dict(self.tensor_types), "weight_types": dict(self.weight_types),
                "quantized_tensors": self.quantized_tensors, "precision": self.precision,
                "input_layouts": list(self.input_layouts) if self.input_layouts else None}


def check_header(data: bytes, what: str) -> None:
    """Raise ValueError unless ``data`` starts like a TFLite flatbuffer."""
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        head = data[4:8] if len(data) >= 8 else data[:8]
        raise ValueError(f"{what} is not a LiteRT/TFLite flatbuffer (identifier {head!r}, expected {FILE_IDENTIFIER!r})")


def _at(items: Sequence[Any], index: int, what: str) -> Any:
    """``items[index]`` for an index read from the file: a corrupt one is the file's fault (ValueError), not ours."""
    if not 0 <= index < len(items):
        raise ValueError(f"corrupt flatbuffer: {what} index {index} out of range (the file has {len(items)})")
    return items[index]


def read_tflite(source: str | Path | bytes) -> TfliteFacts:
    """Facts about a ``.tflite`` file (path or bytes); raises ValueError for other files."""
    from ai_edge_litert import schema_py_generated as schema

    data = source if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
    check_header(bytes(data[:8]), "the file" if isinstance(source, (bytes, bytearray)) else str(source))
    model = schema.Model.GetRootAs(data, 0)
    op_names = _enum_names(schema.BuiltinOperator)
    type_names = _enum_names(schema.TensorType)
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        name = op_names.get(builtin, str(builtin))
        codes.append(code.CustomCode().decode() if name == "CUSTOM" and code.CustomCode() else name)
    graph = model.Subgraphs(0)
    tensors = [graph.Tensors(i) for i in range(graph.TensorsLength())]
    types = [type_names.get(t.Type(), str(t.Type())) for t in tensors]
    constant = [model.Buffers(t.Buffer()).DataLength() > 0 or model.Buffers(t.Buffer()).Size() > 0
                if 0 < t.Buffer() < model.BuffersLength() else False for t in tensors]
    ops: collections.Counter = collections.Counter()
    floats: collections.Counter = collections.Counter()
    integer_ops = 0
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        name = _at(codes, op.OpcodeIndex(), "operator code")
        ops[name] += 1
        first = op.Inputs(0) if op.InputsLength() else -1
        if first < 0 or name in ("QUANTIZE", "DEQUANTIZE"):
            continue
        if _at(types, first, "tensor") in INTEGER_TYPES:
            integer_ops += 1
        elif types[first] in ("FLOAT32", "FLOAT16"):
            floats[name] += 1
    quantized = [bool(t.Quantization() and t.Quantization().ScaleLength()) for t in tensors]
    metadata = {model.Metadata(i).Name().decode(): model.Metadata(i).Buffer() for i in range(model.MetadataLength())}
    layouts = None
    if LAYOUT_METADATA in metadata:
        layouts = tuple(json.loads(bytes(model.Buffers(metadata[LAYOUT_METADATA]).DataAsNumpy()).decode()))

    def info(index: int) -> TensorInfo:
        t = _at(tensors, index, "tensor")
        return TensorInfo(t.Name().decode(), tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else (),
                          types[index], quantized[index])

    return TfliteFacts(
        op_counts=dict(ops), integer_ops=integer_ops, float_ops=dict(floats), tensor_types=dict(collections.Counter(types)),
        weight_types=dict(collections.Counter(ty for ty, c in zip(types, constant) if c)),
        quantized_tensors=sum(quantized),
        inputs=tuple(info(graph.Inputs(i)) for i in range(graph.InputsLength())),
        outputs=tuple(info(graph.Outputs(i)) for i in range(graph.OutputsLength())),
        input_layouts=layouts, metadata=tuple(metadata))


def with_metadata(data: bytes, name: str, value: bytes) -> bytes:
    """The same model with one more metadata entry (replacing one of the same name)."""
    import flatbuffers
    import numpy as np
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    if any((b.offset or 0) > 1 for b in model.buffers or []):
        raise ValueError("the model keeps its weights outside the flatbuffer; cannot add metadata")
    model.metadata = [m for m in (model.metadata or []) if m.name.decode() != name] if model.metadata else []
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(value, dtype=np.uint8)
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name, entry.buffer = name, len(model.buffers) - 1
    model.metadata.append(entry)
    builder = flatbuffers.Builder(len(data) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


@dataclasses.dataclass
class TfliteDelegation:
    """Which ops of a loaded ``.tflite`` run inside delegate calls, and which on builtin kernels."""

    backend: str
    delegated_by_op: dict[str, int]
    builtin_by_op: dict[str, int]
    delegate_calls: int

    @property
    def delegated_ops(self) -> int:
        return sum(self.delegated_by_op.values())

    @property
    def builtin_ops(self) -> int:
        return sum(self.builtin_by_op.values())

    @property
    def total_ops(self) -> int:
        return self.delegated_ops + self.builtin_ops

    @property
    def delegated_percent(self) -> float:
        return 100.0 * self.delegated_ops / self.total_ops if self.total_ops else 100.0

    @property
    def heavy_fallbacks(self) -> dict[str, int]:
        return {op: n for op, n in self.builtin_by_op.items() if op in HEAVY_OPS}

    def summary(self) -> str:
        if not self.builtin_ops:
            return (f"{self.backend} runs all {self.total_ops} ops (100%) in {self.delegate_calls} delegate call(s)")
        rest = ", ".join(f"{op} x{n}" for op, n in sorted(self.builtin_by_op.items(), key=lambda kv: (-kv[1], kv[0])))
        return (f"{self.backend} runs {self.delegated_ops} of {self.total_ops} ops ({self.delegated_percent:.0f}%) in "
                f"{self.delegate_calls} delegate call(s); {self.builtin_ops} run on LiteRT's builtin kernels: {rest}")

    def warning(self) -> str | None:
        """A plain-words WARNING when most ops (or any conv / matmul) fall back, else None."""
        heavy = self.heavy_fallbacks
        if not self.builtin_ops or not (heavy or self.delegated_percent < WARN_BELOW_PERCENT):
            return None
        what = (f"only {self.delegated_percent:.0f}% of ops run in {self.backend}" if not heavy else
                f"{', '.join(f'{op} x{n}' for op, n in sorted(heavy.items()))} run on builtin kernels, not {self.backend}")
        return f"WARNING: {what}; expect it to be much slower than a fully delegated model"

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "delegated_ops": self.delegated_ops, "builtin_ops": self.builtin_ops,
                "delegate_calls": self.delegate_calls, "delegated_percent": round(self.delegated_percent, 1),
                "delegated_by_op": dict(self.delegated_by_op), "builtin_by_op": dict(self.builtin_by_op),
                "summary": self.summary()}


def tflite_delegation(ops_details: Sequence[dict], backend: str = "XNNPACK") -> TfliteDelegation:
    """From ``Interpreter._get_ops_details()`` after delegation: the original nodes stay listed, each
    ``DELEGATE`` node lists the tensors entering and leaving the ops it replaced."""
    producers: dict[int, int] = {}
    for node in ops_details:
        if node["op_name"] != "DELEGATE":
            for t in node["outputs"]:
                producers[int(t)] = node["index"]
    by_index = {node["index"]: node for node in ops_details}
    taken: set[int] = set()
    calls = 0
    for node in ops_details:
        if node["op_name"] != "DELEGATE":
            continue
        calls += 1
        boundary = {int(t) for t in node["inputs"] if t >= 0}
        stack = [int(t) for t in node["outputs"]]
        seen: set[int] = set()
        while stack:
            tensor = stack.pop()
            if tensor in seen or tensor in boundary:
                continue
            seen.add(tensor)
            producer = producers.get(tensor)
            if producer is None or producer in taken:
                continue
            taken.add(producer)
            stack.extend(int(t) for t in by_index[producer]["inputs"] if t >= 0)
    delegated: collections.Counter = collections.Counter()
    builtin: collections.Counter = collections.Counter()
    for node in ops_details:
        if node["op_name"] == "DELEGATE":
            continue
        (delegated if node["index"] in taken else builtin)[node["op_name"]] += 1
    return TfliteDelegation(backend, dict(delegated), dict(builtin), calls)


def _enum_names(enum_class: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum_class).items() if not k.startswith("_") and isinstance(v, int)}
