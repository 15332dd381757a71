"""Rule ``float-functional``: tensor-tensor ``x + y`` / ``x * y`` that eager quantization cannot run.

Eager-mode int8 (``torch.ao.quantization``: the ``seed`` and ``nnapi`` recipes) swaps modules,
not operators: a residual written ``x + y`` stays a float add that then receives quantized
tensors and fails ("Could not run 'aten::add.out' with arguments from the 'QuantizedCPU'
backend").  ``FloatFunctional`` makes the add a module that quantization can replace (and
observe).  PT2E (ExecuTorch) and ONNX Runtime quantization handle ``x + y`` themselves, so this
only matters for the eager int8 path.
"""

from __future__ import annotations

from mobilize.lint.graph import TENSOR_BINARY, TENSOR_BINARY_METHODS, ModelView
from mobilize.lint.report import Finding, Rule, Severity

_FLOAT_FUNCTIONAL_FILE = "quantized/modules/functional_modules.py"
"""Where ``FloatFunctional.add/mul`` live: an add traced from inside them is the fix, not the problem."""
_SPELLING = {"add": "x + y", "iadd": "x += y", "mul": "x * y", "imul": "x *= y"}


def check(view: ModelView) -> list[Finding]:
    findings = []
    for node in view.nodes:
        binary = (node.op == "call_function" and node.target in TENSOR_BINARY) or \
                 (node.op == "call_method" and node.target in TENSOR_BINARY_METHODS)
        if not binary:
            continue
        operands = list(node.args[:2]) if node.op == "call_function" else [node.args[0], *node.args[1:2]]
        if len(operands) < 2 or not all(view.is_tensor(a) for a in operands):
            continue  # x + 1, x * scale: quantized kernels take a scalar
        if any(len(a.meta["tensor_meta"].shape) == 0 for a in operands):
            continue
        if _FLOAT_FUNCTIONAL_FILE in (node.meta.get("stack_trace") or ""):
            continue  # FloatFunctional.add(x, y): FX traces into the method (it is not forward), already right
        op = view.op_name(node).rstrip("_")
        op = {"iadd": "add", "imul": "mul"}.get(op, op)
        spelled = _SPELLING.get(view.op_name(node), f"torch.{op}(x, y)")
        owner = view.owner(node)
        findings.append(Finding(
            Rule.FLOAT_FUNCTIONAL, Severity.WARN, owner,
            f"{spelled} between two tensors in {type(view.modules.get(owner)).__name__}.forward: eager int8 "
            f"quantization cannot run a plain {op} on quantized tensors",
            f"self.skip_{op} = torch.ao.nn.quantized.FloatFunctional() in __init__, then self.skip_{op}.{op}(x, y) "
            f"(only the eager int8 path needs this; PT2E and ONNX quantization handle {spelled})",
            {"op": op}, location=view.location(node)))
    return findings
