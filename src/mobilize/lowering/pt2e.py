"""What every PT2E-quantized graph shares, whichever quantizer annotated it (XNNPACK's, LiteRT's): the output
step and the element-wise error against another module.
"""

from __future__ import annotations

from typing import Any, Sequence


def output_step(converted: Any) -> float | None:
    """The largest quantization step of the graph's outputs (one int8 step of the final layer), if quantized."""
    steps = []
    for node in converted.graph.nodes:
        if node.op != "output":
            continue
        for out in _flatten(node.args):
            if getattr(out, "op", None) == "call_function" and "dequantize_per_tensor" in str(out.target):
                scale = out.args[1]
                if isinstance(scale, (int, float)):
                    steps.append(float(scale))
    return max(steps) if steps else None


def max_abs_difference(a: Any, b: Any, inputs: Sequence[Sequence[Any]]) -> tuple[float, float]:
    """(max |a(x) - b(x)|, max |b(x)|) over ``inputs`` (first output of each)."""
    import torch

    err = scale = 0.0
    with torch.no_grad():
        for x in inputs:
            got, ref = first_output(a(*x)).float(), first_output(b(*x)).float()
            err = max(err, float((got - ref).abs().max()))
            scale = max(scale, float(ref.abs().max()))
    return err, scale


def first_output(out: Any) -> Any:
    while isinstance(out, (tuple, list, dict)):
        out = next(iter(out.values())) if isinstance(out, dict) else out[0]
    return out


def _flatten(args: Any) -> list:
    if isinstance(args, (tuple, list)):
        return [x for a in args for x in _flatten(a)]
    return [args]
