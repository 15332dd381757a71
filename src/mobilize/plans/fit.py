"""Plans that fit the model: the default plan keeps the variants that apply to this model, adds the ones
its layers call for, and says what it left out and why.

    >>> from mobilize.plans.plan import load_plan
    >>> facts = {"layers": {"conv": 0, "linear": 3, "embedding": 1, "attention": 0},
    ...          "input_types": ["int64", "int64"], "input_ranks": [2, 2]}
    >>> plan, left_out = fit_plan(load_plan("default"), facts)
    >>> [v.name for v in plan.variants if "dynamic" in v.name]
    ['executorch-int8-dynamic', 'onnx-dynamic']
    >>> left_out[0]
    ('channels-last', 'no 4-D input: channels-last changes no layout')
"""

from __future__ import annotations

from typing import Any, Mapping

from mobilize.plans.plan import Plan, Variant



def dynamic_variants() -> list[dict[str, Any]]:
    """int8 weights with activations quantized at run time, as each engine declares them (``Backend.dynamic_int8``):
    what Linear / attention models (text, audio) quantize with; on conv nets it is usually slower than float."""
    from mobilize.core.backend import all_backends

    return [dict(v) for b in all_backends() for v in b.dynamic_int8]


def layer_counts(module: Any) -> dict[str, int]:
    """How many of the layers that decide a plan the model has: conv, linear, embedding, attention."""
    import torch

    kinds = {"conv": (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d), "linear": (torch.nn.Linear,),
             "embedding": (torch.nn.Embedding, torch.nn.EmbeddingBag), "attention": (torch.nn.MultiheadAttention,)}
    counts = dict.fromkeys(kinds, 0)
    for m in module.modules():
        for kind, types in kinds.items():
            counts[kind] += isinstance(m, types)
    return counts


def fit_plan(plan: Plan, facts: Mapping[str, Any]) -> tuple[Plan, list[tuple[str, str]]]:
    """The variants of ``plan`` that apply to a model with these ``facts`` (``layers``: :func:`layer_counts`,
    ``input_types``, ``input_ranks``), plus dynamic int8 for Linear/attention models; and (variant, reason)
    for each one left out."""
    layers = facts.get("layers") or {}
    types, ranks = list(facts.get("input_types") or []), list(facts.get("input_ranks") or [])
    integer = [t for t in types if t not in ("float", "float32", "float16", "bfloat16", "float64", "half", "double")]
    kept, left_out = [], []
    for v in plan.variants:
        why = _why_not(v, layers, integer, ranks)
        if why:
            left_out.append((v.name, why))
        else:
            kept.append(v)
    matmul_model = (layers.get("linear", 0) + layers.get("attention", 0)) > 0 and layers.get("conv", 0) == 0
    names = {v.name for v in kept}
    if matmul_model:
        kept += [Variant.from_dict(d) for d in dynamic_variants() if d["name"] not in names]
    return Plan(plan.name, tuple(kept), plan.description, plan.reference if plan.reference in
                {v.name for v in kept} else None), left_out


def with_fitted_additions(plan: Plan) -> Plan:
    """``plan`` with every variant fitting may add (dynamic int8), for ``--variant`` to pick from: a variant the
    fitted plan would run is never refused by name."""
    names = {v.name for v in plan.variants}
    extra = tuple(Variant.from_dict(d) for d in dynamic_variants() if d["name"] not in names)
    return Plan(plan.name, plan.variants + extra, plan.description, plan.reference)


def _why_not(v: Variant, layers: Mapping[str, int], integer: list[str], ranks: list[int]) -> str | None:
    passes = [p.name for p in v.recipe.passes]
    if "channels_last" in passes and 4 not in ranks:
        return "no 4-D input: channels-last changes no layout"
    if "quantize" in passes and integer:
        return (f"eager static int8 (torch.ao) quantizes float inputs; this model takes {', '.join(integer)} "
                f"input(s) (its int8 is in the ExecuTorch and ONNX Runtime variants)")
    return None
