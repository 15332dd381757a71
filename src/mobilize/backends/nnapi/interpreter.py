"""NNAPI's operations executed with torch ops: the host interpreter behind the ``nnapi_host`` runtime.

Tensors live in NNAPI's own layouts (the operand shapes of the serialized model: NHWC feature maps,
[out, kh, kw, in] filters).  Float operations follow NNAPI's definitions (average pools exclude the
padding, SOFTMAX takes its axis in NNAPI dimensions).  TENSOR_QUANT8_ASYMM operations use the
integer arithmetic of NNAPI's reference CPU implementation (``OperationsUtils.cpp`` and the TFLite
kernels it calls): int32 accumulators computed exactly (float32 sums where no partial sum can pass 2**24,
else float64), the real multiplier quantized to 31 bits
with ``frexp`` (``QuantizeMultiplier``), ``SaturatingRoundingDoublingHighMul`` then a rounding right
shift, activation ranges from ``std::round``, ADD rescaling both inputs after a 20-bit left shift,
average pools rounding half up, MEAN truncating its integer division, QUANTIZE rounding halves away
from zero.  LOGISTIC, SOFTMAX and HARD_SWISH on quant8 go through float and round (the reference
uses fixed-point tables there: a step of difference is possible).
"""

from __future__ import annotations

import math
import struct
from typing import Any, Callable, Sequence

from mobilize.core.errors import UnsupportedModelError
from mobilize.backends.nnapi import nnapi_format as fmt

_FUSE = {0: None, 1: "relu", 2: "relu1", 3: "relu6"}
_ITEM_BYTES = {fmt.TENSOR_FLOAT32: 4, fmt.TENSOR_INT32: 4, fmt.TENSOR_QUANT8_ASYMM: 1}


# -- NNAPI's quantized arithmetic (its reference CPU implementation) -------------------------------------

def round_away(x: Any) -> Any:
    """``std::round``: halves away from zero (torch.round rounds them to even)."""
    import torch

    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``QuantizeMultiplier``: real ~= q * 2**(shift - 31) with q a 31-bit integer."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = int(math.floor(q * (1 << 31) + 0.5))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def multiply_by_quantized_multiplier(x: Any, q: int, shift: int) -> Any:
    """``MultiplyByQuantizedMultiplier``: SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT."""
    import torch

    x = x * (1 << max(shift, 0))
    ab = x * q
    nudge = torch.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = torch.div(ab + nudge, 1 << 31, rounding_mode="trunc")
    exponent = max(-shift, 0)
    if exponent == 0:
        return high
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (high < 0).long()
    return (high >> exponent) + ((high & mask) > threshold).long()


def f32(x: float) -> float:
    """A value rounded to float32 (the reference computes scale products in float)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def quantize_value(f: float, op: fmt.Operand) -> int:
    return op.zero_point + int(math.copysign(math.floor(abs(f32(f32(f) / op.scale)) + 0.5), f))


def activation_range(fuse: str | None, op: fmt.Operand) -> tuple[int, int]:
    """``CalculateActivationRangeUint8``."""
    if fuse == "relu":
        return max(0, quantize_value(0.0, op)), 255
    if fuse == "relu6":
        return max(0, quantize_value(0.0, op)), min(255, quantize_value(6.0, op))
    if fuse == "relu1":
        return max(0, quantize_value(-1.0, op)), min(255, quantize_value(1.0, op))
    return 0, 255


def quantize_tensor(x: Any, op: fmt.Operand) -> Any:
    """NNAPI QUANTIZE: ``max(0, min(255, zero_point + std::round(x / scale)))`` in float32."""
    import torch

    return (op.zero_point + round_away(x.float() / f32(op.scale))).clamp(0, 255).to(torch.int64)


def dequantize_tensor(q: Any, op: fmt.Operand) -> Any:
    import torch

    return (q - op.zero_point).to(torch.float32) * f32(op.scale)


def float_activation(x: Any, fuse: str | None) -> Any:
    if fuse == "relu":
        return x.clamp(min=0.0)
    if fuse == "relu6":
        return x.clamp(0.0, 6.0)
    if fuse == "relu1":
        return x.clamp(-1.0, 1.0)
    return x


class Interpreter:
    """Executes a :class:`~mobilize.backends.nnapi.nnapi_format.SerializedModel` with torch ops, operation by operation."""

    def __init__(self, model: fmt.SerializedModel, weights: list):
        self.model = model
        self.operands = model.operands
        self.constants = {i: self._constant(i, v, weights) for i, v in model.values.items()}
        unknown = sorted({f"{op.name} (opcode {op.opcode})" for op in model.operations if op.name not in KERNELS})
        if unknown:
            raise UnsupportedModelError(f"the NNAPI host interpreter has no kernel for {', '.join(unknown)}",
                                        hint=f"it runs: {', '.join(sorted(KERNELS))}")

    def _constant(self, index: int, value: fmt.Value, weights: list) -> Any:
        import torch

        op = self.operands[index]
        if value.source == fmt.SOURCE_IMMEDIATE:
            data = value.data
        else:
            if not 0 <= value.buffer < len(weights):
                raise UnsupportedModelError(f"malformed NNAPI model: operand {index} refers to weight {value.buffer} "
                                            f"of {len(weights)}")
            w = weights[value.buffer]
            w = w.int_repr() if w.is_quantized else w
            data = w.contiguous().numpy().tobytes()[value.offset:value.offset + value.length]
        if op.type == fmt.INT32:
            return struct.unpack("<i", data[:4])[0]
        if op.type == fmt.FLOAT32:
            return struct.unpack("<f", data[:4])[0]
        if op.type == fmt.BOOL:
            return data[0] != 0
        dtype = {fmt.TENSOR_FLOAT32: torch.float32, fmt.TENSOR_INT32: torch.int32,
                 fmt.TENSOR_QUANT8_ASYMM: torch.uint8}.get(op.type)
        if dtype is None:
            raise UnsupportedModelError(f"constant operand {index} has type {fmt.operand_type_name(op.type)}, which "
                                        f"the host interpreter does not read")
        count = math.prod(op.dims)
        if len(data) != count * _ITEM_BYTES[op.type]:
            raise UnsupportedModelError(f"malformed NNAPI model: operand {index} ({fmt.describe_operand(op)}) has "
                                        f"{len(data)} bytes of data")
        if not count:
            return torch.zeros(op.dims, dtype=dtype)
        t = torch.frombuffer(bytearray(data), dtype=dtype).reshape(op.dims)
        return t if dtype == torch.float32 else t.to(torch.int64)

    def run(self, inputs: Sequence[Any], after: Callable[[int, Any], Any] | None = None) -> list:
        """The model's outputs for these inputs (in NNAPI's layouts); ``after(k, out)``, when given, may replace
        operation k's output before later operations read it (the host check's rounding model)."""
        import torch

        env: dict[int, Any] = dict(self.constants)
        for index, t in zip(self.model.inputs, inputs):
            env[index] = t
        with torch.inference_mode():
            for k, op in enumerate(self.model.operations):
                missing = [i for i in op.inputs if i not in env]
                if missing:
                    raise UnsupportedModelError(f"malformed NNAPI model: {op.name} reads operand {missing[0]} before "
                                                f"any operation writes it")
                args = [env[i] for i in op.inputs]
                ins = [self.operands[i] for i in op.inputs]
                outs = [self.operands[i] for i in op.outputs]
                out = KERNELS[op.name](args, ins, outs)
                env[op.outputs[0]] = out if after is None else after(k, out)
        return [env[i] for i in self.model.outputs]


# -- kernels: (argument values, input operands, output operands) -> output value ------------------------

def _nchw(x: Any, nchw: bool) -> Any:
    return x if nchw else x.permute(0, 3, 1, 2)


def _back(y: Any, nchw: bool) -> Any:
    return y.contiguous() if nchw else y.permute(0, 2, 3, 1).contiguous()


def _requantize(acc: Any, real: float, out: fmt.Operand, fuse: str | None) -> Any:
    q, shift = quantize_multiplier(real)
    y = multiply_by_quantized_multiplier(acc, q, shift) + out.zero_point
    lo, hi = activation_range(fuse, out)
    return y.clamp(lo, hi)


def _exact_dtype(x: Any, w: Any, reduce_dims: tuple[int, ...]) -> Any:
    """float32 when no partial sum of the integer products can pass 2**24 (then float32 sums them exactly, and
    fast); else float64 (exact up to 2**53)."""
    import torch

    bound = float(x.abs().max()) * float(w.abs().sum(dim=reduce_dims).max()) if x.numel() and w.numel() else 0.0
    return torch.float32 if bound < float(1 << 23) else torch.float64


def _conv_like(args, ins, outs, *, depthwise: bool = False, transpose: bool = False):
    import torch
    import torch.nn.functional as F

    x, w, b = args[:3]
    pad_l, pad_r, pad_t, pad_b, stride_w, stride_h = args[3:9]
    if depthwise:
        fuse, nchw = _FUSE[args[10]], bool(args[11]) if len(args) > 11 else False
        dilation = (args[13], args[12]) if len(args) > 13 else (1, 1)
    else:
        fuse, nchw = _FUSE[args[9]], bool(args[10]) if len(args) > 10 else False
        dilation = (args[12], args[11]) if len(args) > 12 and not transpose else (1, 1)
    quant = ins[0].type == fmt.TENSOR_QUANT8_ASYMM
    xs = _nchw(x, nchw)
    if quant:
        xs, w = xs - ins[0].zero_point, w - ins[1].zero_point
        dtype = _exact_dtype(xs, w, (0, 1, 2) if depthwise else (1, 2, 3))
        xs, w = xs.to(dtype), w.to(dtype)
    if depthwise:
        weight = w.permute(3, 0, 1, 2)          # [1, kh, kw, out] -> [out, 1, kh, kw]
        groups = xs.shape[1]
    elif transpose:
        weight = w.permute(3, 0, 1, 2)          # [out, kh, kw, in] -> [in, out, kh, kw]
        groups = 1
    else:
        weight = w.permute(0, 3, 1, 2)          # [out, kh, kw, in] -> [out, in, kh, kw]
        groups = 1
    if transpose:
        y = F.conv_transpose2d(xs, weight, stride=(stride_h, stride_w))
        y = y[:, :, pad_t:y.shape[2] - pad_b, pad_l:y.shape[3] - pad_r]
    else:
        y = F.conv2d(F.pad(xs, (pad_l, pad_r, pad_t, pad_b)), weight, stride=(stride_h, stride_w),
                     dilation=dilation, groups=groups)
    if not quant:
        y = y + b.view(1, -1, 1, 1)
        return _back(float_activation(y, fuse), nchw)
    acc = torch.round(y).long() + b.view(1, -1, 1, 1)
    real = f32(ins[0].scale * ins[1].scale) / outs[0].scale
    return _back(_requantize(acc, real, outs[0], fuse), nchw)


def _fully_connected(args, ins, outs):
    import torch

    x, w, b, fuse = args[0], args[1], args[2], _FUSE[args[3]]
    x = x.reshape(-1, w.shape[1])
    if ins[0].type != fmt.TENSOR_QUANT8_ASYMM:
        return float_activation(x @ w.t() + b, fuse)
    xc, wc = x - ins[0].zero_point, w - ins[1].zero_point
    dtype = _exact_dtype(xc, wc, (1,))
    acc = torch.round(xc.to(dtype) @ wc.to(dtype).t()).long() + b
    return _requantize(acc, f32(ins[0].scale * ins[1].scale) / outs[0].scale, outs[0], fuse)


def _pool(args, ins, outs, *, average: bool):
    import torch
    import torch.nn.functional as F

    x = args[0]
    pad_l, pad_r, pad_t, pad_b, stride_w, stride_h, kw, kh = args[1:9]
    fuse, nchw = _FUSE[args[9]], bool(args[10]) if len(args) > 10 else False
    quant = ins[0].type == fmt.TENSOR_QUANT8_ASYMM
    xs = _nchw(x, nchw).double() if quant else _nchw(x, nchw)
    pads, kernel, stride = (pad_l, pad_r, pad_t, pad_b), (kh, kw), (stride_h, stride_w)
    if average:  # NNAPI averages over the window's cells inside the image (padding not counted)
        total = F.avg_pool2d(F.pad(xs, pads), kernel, stride, divisor_override=1)
        count = F.avg_pool2d(F.pad(torch.ones_like(xs[:1, :1]), pads), kernel, stride, divisor_override=1)
        if quant:
            count = count.long()
            y = torch.div(torch.round(total).long() + count // 2, count, rounding_mode="floor")
        else:
            y = total / count
    else:
        y = F.max_pool2d(F.pad(xs, pads, value=-math.inf), kernel, stride)
        y = y.long() if quant else y
    if quant:
        lo, hi = activation_range(fuse, outs[0])
        return _back(y.clamp(lo, hi), nchw)
    return _back(float_activation(y, fuse), nchw)


def _binary(args, ins, outs, *, kind: str):
    import torch

    a, b, fuse = args[0], args[1], _FUSE[args[2]]
    if ins[0].type != fmt.TENSOR_QUANT8_ASYMM:
        y = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}[kind](a, b)
        return float_activation(y, fuse)
    out = outs[0]
    if kind == "mul":
        real = f32(ins[0].scale * ins[1].scale) / out.scale
        return _requantize((a - ins[0].zero_point) * (b - ins[1].zero_point), real, out, fuse)
    if kind == "div":
        raise UnsupportedModelError("NNAPI DIV takes float tensors only; this model divides quantized tensors")
    left_shift = 20
    twice_max = 2.0 * max(ins[0].scale, ins[1].scale)
    q1, s1 = quantize_multiplier(ins[0].scale / twice_max)
    q2, s2 = quantize_multiplier(ins[1].scale / twice_max)
    scaled_a = multiply_by_quantized_multiplier((a - ins[0].zero_point) * (1 << left_shift), q1, s1)
    scaled_b = multiply_by_quantized_multiplier((b - ins[1].zero_point) * (1 << left_shift), q2, s2)
    raw = scaled_a + scaled_b if kind == "add" else scaled_a - scaled_b
    return _requantize(raw, twice_max / ((1 << left_shift) * out.scale), out, fuse)


def _through_float(fn):
    """Elementwise ops NNAPI computes with fixed-point tables on quant8: here float, then rounded."""

    def kernel(args, ins, outs):
        if ins[0].type != fmt.TENSOR_QUANT8_ASYMM:
            return fn(args[0], args[1:])
        return quantize_tensor(fn(dequantize_tensor(args[0], ins[0]), args[1:]), outs[0])

    return kernel


def _clamp_kernel(fuse: str):
    def kernel(args, ins, outs):
        if ins[0].type != fmt.TENSOR_QUANT8_ASYMM:
            return float_activation(args[0], fuse)
        lo, hi = activation_range(fuse, outs[0])
        return args[0].clamp(lo, hi)

    return kernel


def _softmax(x, rest, log: bool = False):
    import torch

    beta, axis = rest[0], rest[1] if len(rest) > 1 else -1
    fn = torch.log_softmax if log else torch.softmax
    return fn(x * beta, dim=axis)


def _quant_softmax(args, ins, outs):
    out = outs[0]
    if ins[0].type == fmt.TENSOR_QUANT8_ASYMM and (not math.isclose(out.scale, 1 / 256) or out.zero_point != 0):
        raise UnsupportedModelError(f"quantized SOFTMAX must output scale 1/256 and zero point 0 in NNAPI; this model's "
                                    f"output is {fmt.describe_operand(out)}: a device would refuse to compile it")
    return _through_float(_softmax)(args, ins, outs)


def _mean(args, ins, outs):
    import torch

    x, axes, keep = args[0], args[1], bool(args[2])
    dims = sorted({int(a) % x.dim() for a in axes.tolist()})
    if ins[0].type != fmt.TENSOR_QUANT8_ASYMM:
        return x.mean(dim=dims, keepdim=keep)
    if (ins[0].scale, ins[0].zero_point) != (outs[0].scale, outs[0].zero_point):
        raise UnsupportedModelError("quantized MEAN that changes scale or zero point is not in the host interpreter")
    count = math.prod(x.shape[d] for d in dims)
    return torch.div(x.sum(dim=dims, keepdim=keep), count, rounding_mode="trunc")


def _concatenation(args, ins, outs):
    import torch

    axis, tensors, out = args[-1], list(args[:-1]), outs[0]
    if out.type == fmt.TENSOR_QUANT8_ASYMM:
        for k, (t, op) in enumerate(zip(tensors, ins)):
            if (op.scale, op.zero_point) != (out.scale, out.zero_point):  # ``requantize<uint8_t>`` in double
                v = ((t - op.zero_point).double() * op.scale) / out.scale + out.zero_point
                tensors[k] = round_away(v.clamp(0, 255)).long()
    return torch.cat(tensors, dim=axis)


def _reshape(args, ins, outs):
    return args[0].reshape([int(d) for d in args[1].tolist()])


def _strided_slice(args, ins, outs):
    x, begin, end, strides = args[0], args[1].tolist(), args[2].tolist(), args[3].tolist()
    begin_mask, end_mask, shrink = args[4], args[5], args[6]
    index = []
    for d in range(x.dim()):
        if strides[d] <= 0:
            raise UnsupportedModelError("STRIDED_SLICE with a negative stride is not in the host interpreter")
        lo = 0 if begin_mask >> d & 1 else begin[d]
        hi = x.shape[d] if end_mask >> d & 1 else end[d]
        index.append(lo if shrink >> d & 1 else slice(lo, hi, strides[d]))
    return x[tuple(index)].contiguous()


def _resize_nearest(args, ins, outs):
    import torch

    x, arg_w, arg_h = args[0], args[1], args[2]
    nchw = bool(args[3]) if len(args) > 3 else False
    xs = _nchw(x, nchw)
    in_h, in_w = xs.shape[2], xs.shape[3]
    out_w = arg_w if ins[1].type == fmt.INT32 else int(math.floor(in_w * arg_w))
    out_h = arg_h if ins[2].type == fmt.INT32 else int(math.floor(in_h * arg_h))
    rows = torch.clamp(torch.floor(torch.arange(out_h) * f32(in_h / out_h)).long(), max=in_h - 1)
    cols = torch.clamp(torch.floor(torch.arange(out_w) * f32(in_w / out_w)).long(), max=in_w - 1)
    return _back(xs[:, :, rows][:, :, :, cols], nchw)


def _prelu(args, ins, outs):
    import torch

    if ins[0].type != fmt.TENSOR_FLOAT32:
        raise UnsupportedModelError("quantized PRELU is not in the host interpreter")
    return torch.where(args[0] >= 0, args[0], args[0] * args[1])


def _quantize(args, ins, outs):
    return quantize_tensor(args[0], outs[0])


def _dequantize(args, ins, outs):
    return dequantize_tensor(args[0], ins[0])


def _hard_swish(x, rest):
    return x * (x + 3.0).clamp(0.0, 6.0) / 6.0


KERNELS = {
    "ADD": lambda a, i, o: _binary(a, i, o, kind="add"),
    "SUB": lambda a, i, o: _binary(a, i, o, kind="sub"),
    "MUL": lambda a, i, o: _binary(a, i, o, kind="mul"),
    "DIV": lambda a, i, o: _binary(a, i, o, kind="div"),
    "CONV_2D": _conv_like,
    "DEPTHWISE_CONV_2D": lambda a, i, o: _conv_like(a, i, o, depthwise=True),
    "TRANSPOSE_CONV_2D": lambda a, i, o: _conv_like(a, i, o, transpose=True),
    "FULLY_CONNECTED": _fully_connected,
    "AVERAGE_POOL_2D": lambda a, i, o: _pool(a, i, o, average=True),
    "MAX_POOL_2D": lambda a, i, o: _pool(a, i, o, average=False),
    "RELU": _clamp_kernel("relu"),
    "RELU1": _clamp_kernel("relu1"),
    "RELU6": _clamp_kernel("relu6"),
    "LOGISTIC": _through_float(lambda x, rest: x.sigmoid()),
    "HARD_SWISH": _through_float(_hard_swish),
    "SOFTMAX": _quant_softmax,
    "LOG_SOFTMAX": lambda a, i, o: _softmax(a[0], a[1:], log=True),
    "MEAN": _mean,
    "CONCATENATION": _concatenation,
    "RESHAPE": _reshape,
    "EXPAND_DIMS": lambda a, i, o: a[0].unsqueeze(a[1]),
    "TRANSPOSE": lambda a, i, o: a[0].permute([int(d) for d in a[1].tolist()]).contiguous(),
    "STRIDED_SLICE": _strided_slice,
    "RESIZE_NEAREST_NEIGHBOR": _resize_nearest,
    "PRELU": _prelu,
    "QUANTIZE": _quantize,
    "DEQUANTIZE": _dequantize,
}
"""By NNAPI operation name: every operation torch's NNAPI serializer emits, plus HARD_SWISH."""
