"""NNAPI (Android): what PyTorch's NNAPI converter (``torch.backends._nnapi``) accepts.

The model is traced and frozen as ``convert_model_to_nnapi`` does and serialized for real, with
NHWC inputs as the nnapi exporter writes them, by the converter's own serializer in the form that
records every node it refuses instead of stopping at the first
(``mobilize.backends.nnapi.check.CheckingSerializer``): ops it has no code for and arguments it
refuses (grouped convs, hardtanh bounds) alike.  The converter takes whole models only — one
refused op and NNAPI gets nothing — so a converted model is 1 partition and a refused one 0.
The result runs on Android only; here it is converted, not run.
"""

from __future__ import annotations

import warnings
from typing import Any

from mobilize.core.errors import third_party_failure
from mobilize.lint.support import TargetSupport, UnsupportedOp

PACKAGES = ("torch",)
PIP = "torch"
HOW = "torch.jit.trace + freeze, torch.backends._nnapi serializer (NHWC inputs)"
LABEL = "the NNAPI converter"
"""How reports name this target."""
FIX = "the converter takes whole models only: replace it, or use ExecuTorch/LiteRT for Android"
"""The advice for an op this target does not take, when the probe has none more specific."""
_BOOKKEEPING = ("prim::Constant", "prim::ListConstruct", "prim::TupleConstruct", "prim::GetAttr",
                "prim::TupleUnpack", "prim::ListUnpack")


def probe(subject: Any) -> TargetSupport:
    import torch

    from mobilize.backends.nnapi.check import CheckingSerializer, UnsupportedOps

    inputs = [_nhwc(t.clone()) for t in subject.example]
    with third_party_failure("torch.jit.trace") as failed, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(subject.module, tuple(inputs), check_trace=False)
        frozen = torch.jit.freeze(traced.eval())
    if failed:  # tracing runs the model's own Python: its failure is a fact about the model
        return TargetSupport("nnapi", "failed", HOW, partitions=0, summary=f"torch.jit.trace cannot trace the model "
                                                                           f"for the NNAPI converter: {failed.reason}")
    ops = sum(1 for n in frozen.graph.nodes() if n.kind() not in _BOOKKEEPING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            CheckingSerializer().serialize_model(frozen, inputs)
    except UnsupportedOps as exc:
        refused_kinds = {f.kind for f in exc.ops if not f.follows_unsupported}
        roots = [f for f in exc.ops if f.kind in refused_kinds]  # the same kind downstream fails the same way
        later = [f for f in exc.ops if f.kind not in refused_kinds]
        unsupported = _group(roots)
        refused = sum(u.count for u in unsupported)
        listed = "; ".join(f"{u.op} x{u.count} ({', '.join(m or '(model)' for m in u.modules[:3])}"
                           f"{', ...' if len(u.modules) > 3 else ''})" for u in unsupported)
        notes = [f"after those, {len(later)} op(s) fed by a refused op could not be judged: "
                 + ", ".join(sorted({f"{f.kind} at {f.where}" for f in later}))] if later else []
        return TargetSupport("nnapi", "failed", HOW, partitions=0, ops_total=ops, ops_supported=max(0, ops - refused),
                             unsupported=unsupported, notes=notes,
                             summary=f"the NNAPI converter refuses the model (whole models only): {listed}")
    return TargetSupport("nnapi", "ok", HOW, partitions=1, ops_total=ops, ops_supported=ops,
                         summary=f"the NNAPI converter takes all {ops} ops (1 partition: the whole model)",
                         notes=["converted, not run: NNAPI models run on Android only"])


def _group(failures: list) -> list[UnsupportedOp]:
    from torch.backends._nnapi.serializer import _NnapiSerializer

    groups: dict[str, UnsupportedOp] = {}
    for f in failures:
        entry = groups.get(f.kind)
        if entry is None:
            reason = ("the converter has no code for it" if f.kind not in _NnapiSerializer.ADDER_MAP else
                      f"the converter refuses its arguments: {f.reason[:160]}")
            entry = groups[f.kind] = UnsupportedOp(f.kind, 0, [], f.source or None, reason,
                                                   _out_of_place(f.kind) or f.suggestion)
        entry.count += 1
        if f.module_path not in entry.modules:
            entry.modules.append(f.module_path)
    return list(groups.values())


def _out_of_place(kind: str) -> str | None:
    """For an in-place op (``aten::relu_``) whose out-of-place form the converter has: say so."""
    from torch.backends._nnapi.serializer import _NnapiSerializer

    base = kind[:-1]
    if kind.endswith("_") and base in _NnapiSerializer.ADDER_MAP:
        name = base.split("::")[-1]
        return (f"use the out-of-place form: the converter has {base} but not {kind} (nn.ReLU(inplace=False), "
                f"torch.{name}(x) instead of an inplace=True module or x.{name}_())")
    return None


def _nhwc(t: Any) -> Any:
    import torch

    if t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
        t.nnapi_nhwc = True
    return t
