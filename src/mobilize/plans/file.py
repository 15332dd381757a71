"""Plans for a model file made elsewhere: the file is the float reference and the variants are what can be
built from it (an ONNX file: ONNX Runtime at each graph-optimization level, int8, .ort, OpenVINO); every
variant that cannot be built from that kind of file is left out with the reason.

    >>> from mobilize.plans.plan import load_plan
    >>> plan, left_out = plan_for_file("default", "onnx")
    >>> plan.name, plan.reference
    ('onnx-file', 'ort-opt-all')
    >>> left_out[0]
    ('eager-fp32', 'runs in eager, which does not load onnx files')
"""

from __future__ import annotations

from typing import Any

from mobilize.core.errors import ConfigError
from mobilize.plans.plan import Plan, Variant, load_plan



def file_plans() -> dict[str, str]:
    """The built-in plan ``compare FILE`` runs (with the default plan) for a file of each format, as each engine
    declares it (``Backend.file_plans``)."""
    from mobilize.core.backend import entries

    return {fmt: plan for fmt, (_, plan) in entries("file_plans").items()}


def plan_for_file(plan: Any, fmt: str) -> tuple[Plan, list[tuple[str, str]]]:
    """The plan to run on a ``fmt`` file and (variants, reason) for what was left out, variants that share a
    reason joined.  The default plan becomes the format's own plan (the default plan's variants that cannot be
    built are listed); a named plan keeps the variants that can be built."""
    if isinstance(plan, str) and plan == "default":
        plans = file_plans()
        if fmt not in plans:
            raise ConfigError(f"compare builds variants from a PyTorch model or {_a(' or '.join(sorted(plans)))} file; "
                              f"this is {_a(fmt)} file",
                              hint="use mobilize bench for a single artifact; for variants, compare the PyTorch model or ONNX file it "
                                   "was made from")
        fitted, left_out = fit_file_plan(load_plan("default"), fmt)
        own, missing = fit_file_plan(load_plan(plans[fmt]), fmt)
        kept = {v.name for v in own.variants}
        left_out = [(n, why) for n, why in left_out if n not in kept] + missing
    else:
        own, left_out = fit_file_plan(plan if isinstance(plan, Plan) else load_plan(plan), fmt)
    if not own.variants:
        raise ConfigError(f"no variant of plan '{own.name}' can be built from {_a(fmt)} file",
                          hint=f"use the default plan, which for {_a(fmt)} file is "
                               f"'{file_plans().get(fmt, 'none')}'" if fmt in file_plans() else "use mobilize bench")
    return own, _grouped(left_out)


def fit_file_plan(plan: Plan, fmt: str) -> tuple[Plan, list[tuple[str, str]]]:
    """The variants of ``plan`` that can be built from a ``fmt`` file, and (variant, reason) for the rest."""
    kept, left_out = [], []
    for v in plan.variants:
        why = why_not_from_file(v, fmt)
        if why:
            left_out.append((v.name, why))
        else:
            kept.append(v)
    names = {v.name for v in kept}
    return Plan(plan.name, tuple(kept), plan.description, plan.reference if plan.reference in names else None), left_out


def why_not_from_file(v: Variant, fmt: str) -> str | None:
    """Why variant ``v`` cannot be built from a ``fmt`` file made elsewhere (None: it can)."""
    from mobilize.core.packages import install_hint, missing, pip_name

    from mobilize.exporters import EXPORTERS
    from mobilize.runtimes import RUNTIMES

    if v.recipe.passes:
        return f"its passes transform a PyTorch module, and the model is {_a(fmt)} file"
    if v.export is None:
        runtime = RUNTIMES.get(v.runtime or "eager")
        if fmt not in runtime.formats:
            return f"runs in {runtime.name}, which does not load {fmt} files"
        packages = runtime.packages
    else:
        exporter = EXPORTERS.get(v.export.name)
        if fmt not in exporter.source_formats:
            return f"the {exporter.name} exporter builds from a PyTorch model, not from {_a(fmt)} file"
        packages = exporter.packages
    gone = missing(packages)
    if gone:
        return f"needs the Python package '{pip_name(gone[0])}' ({install_hint(gone[:1])})"
    return None


def _a(fmt: str) -> str:
    from mobilize.core.text import a

    return a(fmt)


def _grouped(left_out: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """One entry per reason, naming every variant it applies to (in plan order)."""
    by_reason: dict[str, list[str]] = {}
    for name, why in left_out:
        by_reason.setdefault(why, []).append(name)
    return [(", ".join(names), why) for why, names in by_reason.items()]
