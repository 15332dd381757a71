"""The NNAPI model inside a PyTorch file: how to recognise it, read it, and what runs it.

``torch.backends._nnapi.prepare.convert_model_to_nnapi`` serializes an NNAPI model as a list of
int32 words (``NnapiModule.ser_model``) plus a list of weight tensors (``NnapiModule.weights``),
both stored inside an ordinary TorchScript / lite-interpreter archive.  The words are the
arguments of the NNAPI calls the device makes, in this order (torch's serializer writes them,
``aten/src/ATen/nnapi/nnapi_model_loader.cpp`` reads them on the phone)::

    header      version(=1), operand_count, value_count, operation_count, input_count, output_count
    operands    operand_count x (type, dimension_count, scale: float32, zero_point)
    values      value_count x (operand index, source type, source length in bytes)
    operations  operation_count x (opcode, input_count, output_count)
    dimensions  for each operand, dimension_count words (the NNAPI shape: NHWC for channels-last
                feature maps; 0 marks a size computed at load time)
    value data  for each value, its bytes padded to 4: IMMEDIATE holds the value itself,
                NUMBERED_BUFFER holds (weight index, offset, length) into the weights list
    operation args  for each operation, its input then output operand indices
    model inputs, model outputs  operand indices

How mobilize tells an NNAPI file from any other ``.pt`` / ``.ptl``: by the archive.  A file that
carries a converted model contains the TorchScript code of ``torch.backends._nnapi.prepare``
(``NnapiModule``); :func:`is_nnapi_archive` looks for it, so files written by the PyTorch
tutorial (named ``*-nnapi.pt``) are recognised as well as mobilize's own ``*.nnapi.ptl``.
"""

from __future__ import annotations

import dataclasses
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

from mobilize.core.errors import UnsupportedModelError

DEPRECATION = ("NNAPI is deprecated from Android 15 (Google no longer develops it; drivers may drop it). "
               "The maintained routes to phone accelerators are ExecuTorch delegates (XNNPACK, Qualcomm QNN, "
               "MediaTek, Samsung Exynos, Vulkan; --recipe executorch-int8) and LiteRT (TensorFlow Lite) with its "
               "GPU/NPU delegates")

SOURCE_IMMEDIATE = 0
SOURCE_NUMBERED_BUFFER = 2
SOURCE_NUMBERED_MEMORY = 3

# Operand type codes (NeuralNetworks.h); the converter emits the first nine.
FLOAT32, INT32, UINT32, TENSOR_FLOAT32, TENSOR_INT32, TENSOR_QUANT8_ASYMM, BOOL = 0, 1, 2, 3, 4, 5, 6
TENSOR_QUANT16_SYMM, TENSOR_FLOAT16, TENSOR_BOOL8, FLOAT16 = 7, 8, 9, 10
TENSOR_QUANT8_SYMM_PER_CHANNEL, TENSOR_QUANT16_ASYMM = 11, 12
SCALAR_TYPES = (FLOAT32, INT32, UINT32, BOOL, FLOAT16)

HARD_SWISH = 99
"""ANEURALNETWORKS_HARD_SWISH (feature level 4, Android 11): torch's serializer has no code for it."""

_NNAPI_MODULE_CODE = "code/__torch__/torch/backends/_nnapi/prepare"
"""The archive path of NnapiModule's code (``prepare.py``, or ``prepare/___torch_mangle_N.py`` when the saving
process converted more than one model)."""


def _codes(cls_name: str) -> dict[int, str]:
    """Code -> name, read from torch's own serializer (one source of truth for the numbers)."""
    from torch.backends._nnapi import serializer

    cls = getattr(serializer, cls_name)
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


def operation_name(opcode: int) -> str:
    names = _codes("NNAPI_OperationCode")
    names.setdefault(HARD_SWISH, "HARD_SWISH")
    return names.get(opcode, f"operation {opcode}")


def operand_type_name(code: int) -> str:
    return _codes("NNAPI_OperandCode").get(code, f"type {code}")


@dataclasses.dataclass(frozen=True)
class Operand:
    type: int
    dims: tuple[int, ...]
    """The NNAPI shape (NHWC for channels-last feature maps); 0 = sized at load time."""
    scale: float
    zero_point: int

    @property
    def is_scalar(self) -> bool:
        return self.type in SCALAR_TYPES


@dataclasses.dataclass(frozen=True)
class Value:
    """A constant operand: immediate bytes, or a slice of one of the weight tensors."""

    source: int
    data: bytes = b""
    buffer: int = -1
    offset: int = 0
    length: int = 0


@dataclasses.dataclass(frozen=True)
class Operation:
    opcode: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def name(self) -> str:
        return operation_name(self.opcode)


@dataclasses.dataclass
class SerializedModel:
    version: int
    operands: list[Operand]
    values: dict[int, Value]
    operations: list[Operation]
    inputs: list[int]
    outputs: list[int]

    def operation_names(self) -> list[str]:
        return [op.name for op in self.operations]

    @property
    def flexible(self) -> bool:
        """Some operand size is computed at load time from the inputs' shapes."""
        return any(d == 0 for o in self.operands if not o.is_scalar for d in o.dims)


class _Reader:
    def __init__(self, raw: bytes):
        self.raw, self.pos = raw, 0

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.raw):
            raise UnsupportedModelError(f"malformed NNAPI model: it ends inside the {what} "
                                        f"(needs {self.pos + n} bytes, has {len(self.raw)})")
        out = self.raw[self.pos:self.pos + n]
        self.pos += n
        return out

    def ints(self, n: int, what: str) -> tuple[int, ...]:
        return struct.unpack(f"<{n}i", self.take(4 * n, what)) if n else ()


def parse_model(ser_model: Any) -> SerializedModel:
    """Read the serialized words (an int32 tensor or bytes) exactly as the on-device loader does."""
    raw = ser_model if isinstance(ser_model, (bytes, bytearray)) else ser_model.contiguous().numpy().tobytes()
    r = _Reader(bytes(raw))
    version, n_operands, n_values, n_operations, n_inputs, n_outputs = r.ints(6, "header")
    if version != 1:
        raise UnsupportedModelError(f"NNAPI model version {version}: the loader reads version 1 only")
    if min(n_operands, n_values, n_operations, n_inputs, n_outputs) < 0:
        raise UnsupportedModelError("malformed NNAPI model: negative counts in the header")
    heads = [struct.unpack("<iifi", r.take(16, "operand list")) for _ in range(n_operands)]
    value_heads = [r.ints(3, "value list") for _ in range(n_values)]
    op_heads = [r.ints(3, "operation list") for _ in range(n_operations)]
    operands = [Operand(t, r.ints(ndim, "operand dimensions"), scale, zp) for t, ndim, scale, zp in heads]
    values: dict[int, Value] = {}
    for index, source, length in value_heads:
        padded = length if length % 4 == 0 else length + 4 - length % 4
        data = r.take(padded, "value data")[:length]
        if not 0 <= index < n_operands:
            raise UnsupportedModelError(f"malformed NNAPI model: a value for operand {index} of {n_operands}")
        if source == SOURCE_IMMEDIATE:
            values[index] = Value(source, data=data)
        elif source == SOURCE_NUMBERED_BUFFER:
            if length != 12:
                raise UnsupportedModelError("malformed NNAPI model: a weight reference is not 12 bytes")
            buffer, offset, size = struct.unpack("<iii", data)
            values[index] = Value(source, buffer=buffer, offset=offset, length=size)
        else:
            raise UnsupportedModelError(f"NNAPI value source type {source} for operand {index}: the loader "
                                        f"implements immediate (0) and numbered buffer (2) values only")
    operations = []
    for opcode, n_in, n_out in op_heads:
        args = r.ints(n_in + n_out, "operation arguments")
        operations.append(Operation(opcode, args[:n_in], args[n_in:]))
    inputs, outputs = list(r.ints(n_inputs, "model inputs")), list(r.ints(n_outputs, "model outputs"))
    if r.pos != len(r.raw):
        raise UnsupportedModelError(f"malformed NNAPI model: {len(r.raw) - r.pos} bytes after the output list")
    return SerializedModel(version, operands, values, operations, inputs, outputs)


# -- the TorchScript wrapper around the payload ----------------------------------------------------------

@dataclasses.dataclass
class Payload:
    """What ``convert_model_to_nnapi`` stores in its ``NnapiModule``."""

    module: Any
    """The scripted NnapiModule (its ``shape_compute_module`` fixes load-time sizes)."""
    ser_model: Any
    weights: list
    inp_mem_fmts: list[int]
    """Per input: 0 = passed as is, 1 = NCHW tensor permuted to NHWC before NNAPI sees it."""
    out_mem_fmts: list[int]
    """Per output: 0/2 = as NNAPI wrote it, 1 = NHWC permuted back to NCHW."""
    compilation_preference: int
    relax_f32_to_f16: bool

    def ser_model_for(self, args: list) -> Any:
        """The serialized words with load-time sizes filled in for these inputs (the device does this too)."""
        words = self.ser_model.clone()
        self.module.shape_compute_module.prepare(words, args)
        return words


@dataclasses.dataclass
class Pipeline:
    """The NNAPI payload and the CPU steps the file runs around it (the tutorial's ``core`` mode wraps it in a
    quantizer and a dequantizer)."""

    payload: Payload
    quantize: tuple[float, int] | None = None
    """(scale, zero_point): the file quantizes its float input to quint8 on the CPU before NNAPI."""
    dequantize: bool = False
    """The file dequantizes NNAPI's output on the CPU."""
    structure: str = ""


_PASS_THROUGH = {"BundleWrapper"}
"""Wrappers that only forward to ``self.mod`` (the tutorial's and mobilize's bundled-input wrapper)."""


def read_pipeline(scripted: Any) -> Pipeline:
    """Find the NNAPI payload in a loaded TorchScript module and the CPU steps around it.

    Recognised: the converter's ``NnapiInterfaceWrapper``, optionally inside ``Sequential(Quantize, ...,
    DeQuantize)`` and a ``BundleWrapper`` (what the PyTorch tutorial and mobilize write).  Anything else is
    refused with the structure found: mobilize cannot reproduce arbitrary TorchScript around the payload."""
    chain, node = [], scripted
    quantize, dequantize = None, False
    while True:
        name = getattr(node, "original_name", type(node).__name__)
        chain.append(name)
        children = dict(node.named_children())
        if name == "NnapiInterfaceWrapper" and getattr(children.get("mod"), "original_name", "") == "NnapiModule":
            return Pipeline(payload_of(children["mod"]), quantize, dequantize, " > ".join(chain + ["NnapiModule"]))
        if name in _PASS_THROUGH and list(children) == ["mod"]:
            node = children["mod"]
            continue
        if name == "Sequential" and quantize is None and not dequantize:
            parts = list(children.values())
            kinds = [getattr(p, "original_name", "") for p in parts]
            if len(parts) == 3 and kinds[0] == "Quantize" and kinds[2] == "DeQuantize":
                q = parts[0]
                if int(q.dtype) != 13:  # torch.quint8's ScalarType
                    raise UnsupportedModelError("the file quantizes its input to a type other than quint8; NNAPI "
                                                "takes TENSOR_QUANT8_ASYMM (quint8) only")
                quantize, dequantize = (float(q.scale), int(q.zero_point)), True
                chain[-1] = "Sequential(Quantize, ..., DeQuantize)"
                node = parts[1]
                continue
        found = " > ".join(chain)
        raise UnsupportedModelError(
            f"this file wraps its NNAPI model in TorchScript the host interpreter does not reproduce ({found})",
            hint="it runs files whose top module is the converter's wrapper, optionally inside a BundleWrapper and "
                 "Sequential(Quantize, ..., DeQuantize) as the PyTorch tutorial and mobilize write them")


def payload_of(module: Any) -> Payload:
    """The payload of a (scripted) ``NnapiModule``."""
    return Payload(module, module.ser_model, list(module.weights), list(module.inp_mem_fmts),
                   list(module.out_mem_fmts), int(module.compilation_preference), bool(module.relax_f32_to_f16))


def is_nnapi_archive(path: str | Path) -> bool:
    """True when the TorchScript / lite archive at ``path`` carries a converted NNAPI model."""
    try:
        with zipfile.ZipFile(path) as zf:
            return any(_NNAPI_MODULE_CODE in n and n.endswith(".py") for n in zf.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def claims_file(path: str | Path, fmt: str) -> bool:
    """A .pt/.ptl whose payload is an NNAPI model is an NNAPI file (told apart by its archive)."""
    return fmt in ("torchscript", "lite") and is_nnapi_archive(path)


def device_runtime_status(payload: Payload) -> str | None:
    """Try the real NNAPI runtime through torch's own binding (``torch.classes._nnapi.Compilation``, what the
    phone runs).  None when it compiled the model (an Android device, or a host build of
    ``libneuralnetworks.so`` on the library path); otherwise the runtime's own reason, e.g. that
    ``libneuralnetworks.so`` cannot be opened."""
    import torch

    try:
        compilation = torch.classes._nnapi.Compilation()
        compilation.init2(payload.ser_model, [w.contiguous() for w in payload.weights],
                          payload.compilation_preference, payload.relax_f32_to_f16)
    except RuntimeError as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        reason = next((ln for ln in lines if "libneuralnetworks" in ln), lines[0] if lines else "unknown error")
        reason = reason[reason.find("Failed to load"):] if "Failed to load" in reason else reason
        return re.sub(r"(\S+) \1:", r"\1:", reason)
    return None


def nnapi_twin_path(path: str | Path) -> Path:
    """Where mobilize writes the CPU twin of an NNAPI file: ``m.nnapi.ptl`` -> ``m.cpu.ptl``."""
    path = Path(path)
    name = path.name
    stem = name[: -len(".nnapi.ptl")] if name.endswith(".nnapi.ptl") else path.stem
    return path.with_name(stem + ".cpu.ptl")


def describe_operand(op: Operand) -> str:
    q = f" scale {op.scale:.6g} zero point {op.zero_point}" if op.type == TENSOR_QUANT8_ASYMM else ""
    return f"{operand_type_name(op.type)} [{', '.join(map(str, op.dims))}]{q}"

