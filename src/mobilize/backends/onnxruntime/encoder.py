"""Static int8 for a Linear-heavy encoder (BERT, MiniLM, a ViT's blocks) as the field's tools quantize one.

An encoder is found from its graph: MatMul/Gemm outnumber Conv, beside a LayerNorm (``LayerNormalization`` or its
ReduceMean form) and a Softmax (attention).  Quantizing every op ONNX Runtime takes, as a CNN wants, ruins one:
uint8 per-tensor ranges on LayerNorm, the residual adds, GELU and the masking path cost 20-30 dB (a 2-layer
BERT: cosine 0.97, SQNR 11.6 dB).  The field quantizes only the Linear layers: ONNX Runtime's dynamic
quantization takes MatMul with a constant B only (``MatMulConstBOnly``), optimum's transformer configs list
MatMul (and Add for QOperator files), and NNCF's ``ModelType.TRANSFORMER`` ignores the elementwise ops,
normalizations and reductions.  So for an encoder the static QDQ file quantizes the MatMul/Gemm that read a weight
(int8 per-channel weights, uint8 activations) and keeps in float LayerNorm, Softmax, GELU, the residual adds, the
mask and the attention's two activation-by-activation MatMuls (Q·Kᵀ, P·V: ONNX Runtime's QDQ quantizer does not
honour ``MatMulConstBOnly``, so they are excluded by name).  SmoothQuant (ONNX Runtime's ``SmoothQuant`` extra
option) needs the neural-compressor package, not installed with mobilize: not applied.

    >>> shape = EncoderShape(linear=12, activation=4, convs=0, norms=5, softmaxes=2)
    >>> shape.is_encoder, shape.text()
    (True, '16 MatMul/Gemm (12 reading a weight, 4 of two activations), 0 Conv, 5 LayerNorm, 2 Softmax')
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Sequence

from mobilize.core.errors import UnsupportedModelError

LINEAR_OPS = ("MatMul", "Gemm")
"""What the encoder scheme quantizes."""
NORMS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization"})
PASS_THROUGH = frozenset({"Transpose", "Reshape", "Cast", "Identity", "Unsqueeze", "Squeeze", "Flatten"})
"""Ops between a weight and the MatMul reading it (an exported Linear transposes its weight)."""


class ModelType(enum.StrEnum):
    AUTO = "auto"
    """An encoder (found from the graph) gets the transformer scheme; any other model, every op quantized."""
    TRANSFORMER = "transformer"
    """Only the MatMul/Gemm reading a weight; refused, with the reason, where the graph has none."""
    GENERIC = "generic"
    """Every op ONNX Runtime's static quantizer takes (the CNN scheme)."""


@dataclasses.dataclass(frozen=True)
class EncoderShape:
    """The op counts an encoder is recognised by."""

    linear: int
    """MatMul/Gemm reading a weight (a Linear layer)."""
    activation: int
    """MatMul of two activations (attention's Q·Kᵀ and P·V)."""
    convs: int
    norms: int
    softmaxes: int
    activation_nodes: tuple[str, ...] = ()

    @property
    def is_encoder(self) -> bool:
        return self.linear > self.convs and self.norms > 0 and self.softmaxes > 0

    def text(self) -> str:
        return (f"{self.linear + self.activation} MatMul/Gemm ({self.linear} reading a weight, {self.activation} of "
                f"two activations), {self.convs} Conv, {self.norms} LayerNorm, {self.softmaxes} Softmax")


def encoder_shape(proto: Any) -> EncoderShape:
    """Count what makes ``proto`` an encoder (a decomposed LayerNorm counts once per pair of ReduceMean)."""
    nodes = list(proto.graph.node)
    constant = _constant_tensors(proto)
    linear, activation = 0, []
    for node in nodes:
        if node.op_type in LINEAR_OPS:
            if any(name in constant for name in node.input[:2]):
                linear += 1
            elif node.op_type == "MatMul":
                activation.append(node.name)
    count = lambda *ops: sum(n.op_type in ops for n in nodes)  # noqa: E731
    norms = count(*NORMS) + count("ReduceMean") // 2
    return EncoderShape(linear, len(activation), count("Conv", "ConvTranspose"), norms, count("Softmax"),
                        tuple(activation))


def _constant_tensors(proto: Any) -> set[str]:
    """Initializers, Constant outputs, and what pass-through ops make of them."""
    known = {t.name for t in proto.graph.initializer}
    known |= {o for n in proto.graph.node if n.op_type == "Constant" for o in n.output}
    changed = True
    while changed:
        changed = False
        for node in proto.graph.node:
            if node.op_type in PASS_THROUGH and node.input and node.input[0] in known and node.output[0] not in known:
                known.add(node.output[0])
                changed = True
    return known


def static_route(proto: Any, ops: Sequence[str], model_type: str) -> tuple[list[str], list[str], list[str]]:
    """The op types to quantize, the nodes to keep in float and the notes, for ``model_type`` (named nodes: the
    caller ran ``name_nodes``)."""
    shape = encoder_shape(proto)
    wanted = ModelType(model_type)
    if wanted == ModelType.GENERIC or (wanted == ModelType.AUTO and not shape.is_encoder):
        return _generic(proto, ops, shape, wanted)
    if not shape.linear:
        raise UnsupportedModelError(
            f"model_type: transformer quantizes the MatMul/Gemm that read a weight; this graph has none "
            f"({shape.text()})", hint="use model_type: auto or generic, or quantize: dynamic")
    kept = [op for op in LINEAR_OPS if op in ops]
    why = "set by model_type" if wanted == ModelType.TRANSFORMER else "found from the graph"
    return kept, list(shape.activation_nodes), [
        f"encoder ({why}: {shape.text()}): int8 on the {shape.linear} MatMul/Gemm that read a weight only "
        f"(int8 weights, uint8 activations), as ONNX Runtime's dynamic quantization and NNCF's transformer preset "
        f"quantize an encoder; LayerNorm, Softmax, GELU, the residual adds, the mask and the {shape.activation} "
        f"MatMul(s) of two activations stay float (quantizing them costs 20-30 dB on an encoder); the other route "
        f"for encoders is dynamic int8 (recipe onnx-dynamic); model_type: generic quantizes every op"]


def _generic(proto: Any, ops: Sequence[str], shape: EncoderShape, wanted: ModelType) -> tuple[list, list, list]:
    notes = []
    if wanted == ModelType.AUTO and shape.norms and shape.softmaxes:  # attention inside a conv net: say why not
        notes.append(f"not quantized as an encoder ({shape.text()}: Conv outnumber the MatMul/Gemm reading a "
                     f"weight); model_type: transformer would quantize only those")
    norms = sum(n.op_type == "LayerNormalization" for n in proto.graph.node)
    if norms and "LayerNormalization" in ops:
        ops = [op for op in ops if op != "LayerNormalization"]
        notes.append(f"kept the {norms} LayerNormalization node(s) in float: per-channel scales do not apply to "
                     f"their rank-1 weight (ONNX Runtime's 'Axis 1 is out-of-range ... with rank 1') and ONNX "
                     f"Runtime has no int8 LayerNorm kernel, so quantizing one only adds rounding around it")
    return list(ops), [], notes
