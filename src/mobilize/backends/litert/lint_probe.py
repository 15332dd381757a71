"""LiteRT: convert with litert-torch, load in the LiteRT interpreter and read which ops its XNNPACK delegate took.

The conversion is the litert exporter's (``mobilize.backends.litert.convert.to_tflite``, NHWC
4-D inputs, float32); the delegation is read from the interpreter after the default XNNPACK
delegate was applied (``mobilize.backends.litert.runtime.delegation_of``).  Ops left on LiteRT's builtin
kernels are named with the module paths litert-torch writes into tensor names
(``.../__main__.Block_b/torch.nn.modules.conv.Conv2d_c;3`` -> ``b.c``).  Needs ``litert-torch`` and
``ai-edge-litert``; without them the target is reported unavailable with the pip command.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from mobilize.core.errors import MobilizeError
from mobilize.lint.support import TargetSupport, UnsupportedOp

PACKAGES = ("litert_torch", "ai_edge_litert")
PIP = "litert-torch ai-edge-litert"
HOW = "litert_torch.convert (NHWC inputs) + LiteRT interpreter with its default XNNPACK delegate"
LABEL = "LiteRT"
"""How reports name this target."""
FIX = "replace it with an op LiteRT's delegate takes, or move it out of the model"
"""The advice for an op this target does not take, when the probe has none more specific."""


def probe(subject: Any) -> TargetSupport:
    from ai_edge_litert.interpreter import Interpreter

    from mobilize.backends.litert.convert import to_tflite
    from mobilize.backends.litert.runtime import delegation_of, quiet_native_output

    nhwc = [i for i, t in enumerate(subject.example) if t.dim() == 4]
    try:
        data, notes = to_tflite(subject.module, subject.example, None, nhwc_inputs=nhwc)
    except MobilizeError as exc:
        return TargetSupport("litert", "failed", HOW, partitions=0, summary=f"litert-torch cannot convert the model: {exc}")
    with tempfile.TemporaryDirectory(prefix="mobilize-lint-") as tmp:
        path = Path(tmp) / "model.tflite"
        path.write_bytes(data)
        delegation = delegation_of(path)
        with quiet_native_output():
            interpreter = Interpreter(model_path=str(path))
        ops = interpreter._get_ops_details()
        names = {t["index"]: t["name"] for t in interpreter.get_tensor_details()}
    unsupported = []
    for op, count in sorted(delegation.builtin_by_op.items(), key=lambda kv: (-kv[1], kv[0])):
        nodes = [n for n in ops if n["op_name"] == op]
        modules = list(dict.fromkeys(module_path(subject.module, names.get(t, "")) for n in nodes for t in n["outputs"]))
        which = "" if count == len(nodes) else f" ({count} of the {len(nodes)} {op} nodes; which ones is not recorded)"
        unsupported.append(UnsupportedOp(op, count, [m for m in modules if m is not None],
                                         reason=f"runs on LiteRT's builtin kernels, outside the XNNPACK delegate{which}"))
    partitions = delegation.delegate_calls
    if not delegation.builtin_ops:
        summary = f"LiteRT's XNNPACK delegate takes all {delegation.total_ops} ops in {partitions} partition(s)"
    else:
        listed = "; ".join(f"{u.op} x{u.count} ({', '.join(m or '(model)' for m in u.modules[:3])})" for u in unsupported)
        summary = (f"LiteRT's XNNPACK delegate takes {delegation.delegated_ops} of {delegation.total_ops} ops in "
                   f"{partitions} partition(s); not taken: {listed}")
    status = "ok" if not delegation.builtin_ops else "partial" if partitions else "failed"
    return TargetSupport("litert", status, HOW, partitions=partitions, ops_total=delegation.total_ops,
                         ops_supported=delegation.delegated_ops, unsupported=unsupported, summary=summary,
                         details={"delegation": delegation.to_json()}, notes=notes)


def module_path(root: Any, tensor_name: str) -> str | None:
    """The module path litert-torch encoded in a tensor name, matched against the model's own module tree;
    None when the name carries none (graph inputs/outputs)."""
    segments = tensor_name.split(";")[0].split("/")
    current, path = root, []
    for seg in segments:
        step = next(((name, child) for name, child in current.named_children()
                     if seg.endswith("_" + name) and seg[: -len(name) - 1].endswith(type(child).__name__)), None)
        if step is None:
            if path:
                break
            continue  # wrapper segments before the model's own modules
        path.append(step[0])
        current = step[1]
    if path:
        return ".".join(path)
    return "" if any(seg.endswith(type(root).__name__ + "_wrapped") or seg.split(".")[-1] == type(root).__name__
                     for seg in segments) else None


