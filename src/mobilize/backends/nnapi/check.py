"""Every op the NNAPI converter cannot take, all at once, each with its module path and a fix.

The check is the converter itself: :class:`CheckingSerializer` is torch's ``_NnapiSerializer``
with one change.  Where the converter stops at the first node it cannot translate (an op it has
no code for, or arguments it refuses: a grouped conv, hardtanh other than (0, 6), ...), this one
records the node, gives its outputs a stand-in operand shaped like its first input and goes on,
so one conversion attempt lists every problem.  A failure downstream of an earlier one is marked
as possibly caused by it.  With no failures the serializer's output is the converter's, unchanged.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch
from torch.backends._nnapi.serializer import DimOrder, NNAPI_OperandCode, Operand, _NnapiSerializer

from mobilize.core.errors import third_party_failure

_MAINTAINED = "or export with the ExecuTorch (--recipe executorch-int8) or LiteRT targets, which take far more ops"

SUGGESTIONS = {
    "aten::hardswish": "use nn.ReLU6 (NNAPI RELU6): the converter emits no HARD_SWISH",
    "aten::hardsigmoid": "use torch.sigmoid (NNAPI LOGISTIC)",
    "aten::silu": "use nn.ReLU or nn.ReLU6",
    "aten::gelu": "use nn.ReLU or nn.ReLU6",
    "aten::tanh": "use torch.sigmoid or hardtanh(-1, 1)",
    "aten::clamp": "use nn.ReLU6 or hardtanh(-1, 1) (NNAPI RELU6 / RELU1)",
    "aten::relu6": "use the nn.ReLU6 module (it traces to hardtanh(0, 6), which the converter maps to NNAPI RELU6)",
    "aten::mul": "multiply tensors, not by a Python number (the converter takes tensor operands only), or fold the "
                 "constant into the neighbouring conv or linear",
    "aten::add": "add tensors, not a Python number (the converter takes tensor operands only); alpha must be 1",
    "aten::div": "divide tensors, not by a Python number (the converter takes tensor operands only)",
    "aten::hardtanh": "NNAPI has RELU6 (0, 6) and RELU1 (-1, 1) only: use one of those bounds",
    "aten::batch_norm": "a BatchNorm that does not follow a plain conv cannot be folded into it: move it after a "
                        "conv or drop it",
    "aten::_convolution_mode": "string padding ('same'/'valid') traces to aten::_convolution_mode, which the "
                               "converter has no code for: give the conv numeric padding (kernel_size // 2 for "
                               "'same' with odd kernels and stride 1, 0 for 'valid')",
    "aten::layer_norm": "the converter has no normalization layers",
    "aten::group_norm": "the converter has no normalization layers",
    "aten::view": "use x.reshape(n, -1) or torch.flatten(x, 1)",
    "aten::permute": "keep the tensor layout; NNAPI takes NHWC input through nnapi_nhwc already",
    "aten::transpose": "keep the tensor layout; NNAPI takes NHWC input through nnapi_nhwc already",
    "aten::contiguous": "drop the .contiguous() call (NNAPI tensors are always dense)",
    "aten::matmul": "use nn.Linear (NNAPI FULLY_CONNECTED)",
    "aten::bmm": "use nn.Linear (NNAPI FULLY_CONNECTED)",
    "aten::upsample_bilinear2d": "use nearest upsampling (NNAPI RESIZE_NEAREST_NEIGHBOR)",
    "aten::adaptive_avg_pool2d": "use AdaptiveAvgPool2d(1) or an explicit AvgPool2d",
    "aten::_convolution": "NNAPI takes full and depthwise convolutions without dilation; split grouped convs",
    "aten::conv2d": "NNAPI takes full and depthwise convolutions without dilation; split grouped convs",
    "quantized::conv2d": "quantize with per-tensor weights (engine qnnpack); no grouped or dilated convs",
    "quantized::conv2d_relu": "quantize with per-tensor weights (engine qnnpack); no grouped or dilated convs",
    "quantized::linear": "quantize with per-tensor weights (engine qnnpack)",
    "quantized::linear_dynamic": "use static quantization (quantize: {mode: static}); NNAPI has no dynamic int8",
    "aten::dropout": "call the model in eval mode (dropout is removed for inference)",
    "aten::quantize_per_tensor": "NNAPI quantizes to quint8 only, from NHWC feature maps",
    "aten::max_pool2d": "give max_pool2d an explicit stride (the converter reads an empty one as none); no dilation",
    "aten::avg_pool2d": "NNAPI averages without count_include_pad=False or divisor_override",
}
CAUSED_BY = {
    ("aten::batch_norm", "aten::_convolution_mode"):
        "the conv before it has string padding ('same'/'valid'), which traces to aten::_convolution_mode, and "
        "freezing folds a BatchNorm only into a plain conv: give that conv numeric padding (kernel_size // 2 for "
        "'same' with odd kernels and stride 1, 0 for 'valid') and both convert",
}
"""(op, the op producing its input) -> the fix when the producer is the real cause."""
DEFAULT_SUGGESTION = "replace it with an op the converter takes (conv, linear, add, mul, relu, relu6, pooling, " \
                     "mean, reshape, flatten, cat, softmax)"


@dataclasses.dataclass(frozen=True)
class UnsupportedOp:
    kind: str
    """The TorchScript op, e.g. ``aten::hardswish``."""
    module_path: str
    """Dotted path of the module that called it (``features.3.act``); empty for the top module's forward."""
    source: str
    """The user's source line that called it (``model.py:12``), when TorchScript recorded one."""
    reason: str
    """The converter's own message."""
    follows_unsupported: bool = False
    """Its input comes from an earlier unsupported op: it may convert once that one is replaced."""
    after: str = ""
    """The op that produced its first input (``aten::_convolution_mode``), when that decides the fix."""

    @property
    def where(self) -> str:
        place = self.module_path or "the top module's forward"
        return f"{place} ({self.source})" if self.source else place

    @property
    def suggestion(self) -> str:
        return CAUSED_BY.get((self.kind, self.after)) or SUGGESTIONS.get(self.kind, DEFAULT_SUGGESTION)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "suggestion": self.suggestion}


class UnsupportedOps(Exception):
    def __init__(self, ops: list[UnsupportedOp]):
        self.ops = ops
        super().__init__(", ".join(f"{op.kind} at {op.where}" for op in ops))


class CheckingSerializer(_NnapiSerializer):
    """torch's NNAPI serializer, collecting every node it cannot translate instead of stopping at the first."""

    def __init__(self, use_int16_for_qint16: bool = False):
        super().__init__(config=None, use_int16_for_qint16=use_int16_for_qint16)
        self.failures: list[UnsupportedOp] = []
        self._tainted: set = set()

    def serialize_model(self, model, inputs, return_shapes=None):
        self.model = model  # the frozen module: the host check probes its values (see _nnapi_host_check.Probe)
        with third_party_failure("the NNAPI serializer") as failed:
            result = super().serialize_model(model, inputs, return_shapes)
        if failed:  # the model's inputs or outputs; after a failure, its stand-ins
            if not self.failures:
                self.failures.append(UnsupportedOp("model inputs/outputs", "", "", failed.reason))
            result = None
        if self.failures:
            raise UnsupportedOps(self.failures)
        return result

    def add_quantize(self, node) -> None:
        """FX-quantized models keep a mid-graph quantize's scale and zero point as tensor attributes (frozen into
        tensor constants); torch's serializer wants Python numbers.  Read them as the numbers they are."""
        for index, kind, cast in ((1, torch._C.FloatType, float), (2, torch._C.IntType, int)):
            value = node.inputsAt(index)
            record = self.constants.get(value)
            if record is not None and record[0].kind() == "TensorType" and record[1].numel() == 1:
                self.constants[value] = (kind.get(), cast(record[1].item()))
        super().add_quantize(node)

    def add_node(self, node) -> None:
        tainted = any(v in self._tainted for v in node.inputs())
        with third_party_failure(f"the NNAPI converter on {node.kind()}") as failed:
            super().add_node(node)
        if failed:
            known = node.kind() in self.ADDER_MAP
            reason = failed.reason if known else "the converter has no translation for this op"
            producer = node.inputsAt(0).node().kind() if node.inputsSize() else ""
            self.failures.append(UnsupportedOp(node.kind(), module_path(node), source_line(node), reason,
                                               tainted and known, producer if (node.kind(), producer) in CAUSED_BY
                                               else ""))
            for out in node.outputs():
                self._stand_in(node, out)
            tainted = True
        if tainted:
            self._tainted.update(node.outputs())

    def _stand_in(self, node, out) -> None:
        if out in self.jitval_operand_map or out in self.constants:
            return
        if out.type().kind() != "TensorType":
            self.add_constant_value(out, out.type(), None)
            return
        like = next((self.operands[self.jitval_operand_map[v]] for v in node.inputs() if v in self.jitval_operand_map),
                    None)
        self.add_tensor_operand(out, like or Operand(NNAPI_OperandCode.TENSOR_FLOAT32, (1,),
                                                     DimOrder.PRESUMED_CONTIGUOUS, 0.0, 0))


def module_path(node) -> str:
    """``__module.blk/__module.blk.act`` -> ``blk.act`` (the scope torch.jit.trace recorded)."""
    scope = node.scopeName().split("/")[-1]
    return scope.removeprefix("__module").lstrip(".")


def source_line(node) -> str:
    """The first frame of the node's call stack outside torch: the user's own line."""
    torch_dir = os.path.realpath(os.path.dirname(torch.__file__)) + os.sep
    for line in (node.sourceRange() or "").splitlines():
        path, _, rest = line.strip().partition("(")
        if path and rest and not os.path.realpath(path).startswith(torch_dir):
            return f"{os.path.basename(path)}:{rest.split(')', 1)[0]}"
    return ""


def describe(ops: list[UnsupportedOp]) -> tuple[str, str]:
    """(message, hint) for an UnsupportedModelError: every op, then what to do about each kind."""
    generic = "the converter has no translation for this op"

    def one(op: UnsupportedOp) -> str:
        return f"{op.kind} at {op.where}" + ("" if op.reason == generic else f" ({op.reason[:160]})")

    roots = [op for op in ops if not op.follows_unsupported]
    later = [op for op in ops if op.follows_unsupported]
    message = f"the NNAPI converter cannot take {len(roots)} op(s) of this model: " + "; ".join(map(one, roots))
    if later:
        message += (f"; after those, {len(later)} more may convert once they are replaced: "
                    + "; ".join(map(one, later)))
    fixes = dict.fromkeys(f"{op.kind}: {op.suggestion}" for op in roots)
    return message, "; ".join(fixes) + "; " + _MAINTAINED
