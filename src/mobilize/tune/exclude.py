"""Keep the layers that cost an int8 candidate its accuracy in float, one more at a time, until the budget holds.

The route says how (:class:`~mobilize.core.tune_route.Exclusion`): ``NODES`` localises the int8 file's drift
against its fp32 twin's file (:mod:`mobilize.backends.onnxruntime.drift`) and keeps the worst nodes in float;
``MODULES`` localises it on the model's quantized PT2E graph (:mod:`mobilize.backends.executorch.drift`) and keeps
the worst layers' modules in float (the export step's ``exclude``).  Each engine's localiser is reached through
the backend registry by the export step's name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from mobilize.accuracy.drift import cause_lines, masking_first
from mobilize.core.tune_route import Exclusion, TuneRoute
from mobilize.tune.candidates import Candidate
from mobilize.tune.routes import route
from mobilize.tune.search import Search, try_candidate

DRIFT_SAMPLES = 32
"""Samples the per-layer localisation runs on."""
MAX_EXCLUSIONS = 8
"""Greedy exclusion stops after keeping this many layers in float."""


def exclude_over_budget(search: Search, candidates: list[Candidate], runtimes: Sequence[str], limit: int,
                        out_of_time: Callable[[], bool], echo: Callable[[str], None],
                        layers: dict[str, list[Any]]) -> None:
    """For each searched route that can exclude layers and whose int8 starting points all missed the budget: the
    greedy exclusion from the best of them.  Each localised candidate's ranked per-layer drift goes into ``layers``
    as soon as its exclusion ends (so Ctrl-C in a later one keeps it)."""
    vacuous = search.reference_warning is not None  # no drift to localise against a near-constant output
    for r in (route(rt) for rt in dict.fromkeys(runtimes)):
        if r.exclusion is Exclusion.NONE or vacuous:
            continue
        names = {s.name for s in r.int8_starts()}
        bases = [c for c in candidates if c.name in names and c.path and c.verdict]
        twin = next((c.path for c in candidates if c.name == r.fp32_twin and c.path), None)
        if not bases or any(c.within_budget for c in bases) or (r.exclusion is Exclusion.NODES and twin is None):
            continue
        if out_of_time():
            continue
        base = max(bases, key=lambda c: (c.verdict.outcome != "MISMATCH", c.top1 or 0.0,
                                         (c.measure or {}).get("value") or 0.0, c.cosine or 0.0))
        if r.exclusion is Exclusion.NODES:
            layers[base.name] = _exclude_nodes(search, r, base, twin, candidates, limit, out_of_time, echo)
        else:
            layers[base.name] = _exclude_modules(search, base, candidates, limit, out_of_time, echo)


def _exclude_nodes(search: Search, r: TuneRoute, base: Candidate, fp32: Any, candidates: list[Candidate],
                   limit: int, out_of_time: Callable[[], bool], echo: Callable[[str], None]) -> list[Any]:
    """Localise ``base``'s drift against the fp32 file, then keep the worst nodes in float one more at a time
    until the budget holds."""
    from mobilize.backends import drift_for
    from mobilize.pipeline.recipe import Recipe, Step

    step = base.recipe.exports[0]
    drift = drift_for(step.name)
    pre = drift.preprocessed_float(fp32, search.work / f"{search.stem}-fp32-pre{fp32.suffix}")
    feeds = drift.feeds_for(pre, search.context().calibration_inputs(DRIFT_SAMPLES))
    ranked = masking_first(drift.localise(pre, base.path, feeds))  # a masking constant is the cause: kept first
    echo(f"per-layer drift of {base.name} on {len(feeds)} samples (worst first):")
    for line in drift.format_table(ranked) + cause_lines(ranked):
        echo("  " + line)
    excluded: list[str] = []
    for k, layer in enumerate(ranked[:limit], 1):
        if out_of_time():
            break
        new = [n for n in layer.nodes if n not in excluded]
        if not new:
            continue
        excluded += new
        config = dataclasses.replace(step.config, exclude_nodes=tuple(excluded))
        name = f"{base.name}-float{k}"
        recipe = Recipe(name, (), (Step(step.name, config),), base.recipe.runtime,
                        f"tune: {base.name} with {len(excluded)} node(s) kept in float")
        c = Candidate(name, recipe, base.runtime, excluded=tuple(excluded))
        candidates.append(c)
        echo(f"keep {layer.tensor} in float ({', '.join(new)})")
        try_candidate(search, c, echo)
        if c.within_budget:
            break
    return ranked


def _exclude_modules(search: Search, base: Candidate, candidates: list[Candidate], limit: int,
                     out_of_time: Callable[[], bool], echo: Callable[[str], None]) -> list[Any]:
    """Localise ``base``'s drift on its PT2E graph, then keep the worst layers' modules in float (``exclude``),
    one more layer at a time, until the budget holds."""
    from mobilize.backends import drift_for
    from mobilize.pipeline.recipe import Recipe, Step

    step = base.recipe.exports[0]
    drift = drift_for(step.name)
    ctx = search.context()
    calibration = ctx.calibration_inputs(step.config.calibration_samples)  # the samples the exporter calibrates on
    samples = ctx.calibration_inputs(DRIFT_SAMPLES)
    ranked = drift.localise(search.module, ctx.example_inputs(), calibration, samples, step.config.per_channel,
                            step.config.exclude)
    ranked = masking_first(ranked)
    echo(f"per-layer drift of {base.name} on {len(samples)} samples (worst first):")
    for line in drift.format_table(ranked) + cause_lines(ranked):
        echo("  " + line)
    excluded: list[str] = list(step.config.exclude)
    for k, layer in enumerate(ranked[:limit], 1):
        if out_of_time():
            break
        new = [m for m in layer.nodes if m not in excluded]
        if not new:
            continue
        excluded += new
        name = f"{base.name}-float{k}"
        recipe = Recipe(name, base.recipe.passes,
                        (Step(step.name, dataclasses.replace(step.config, exclude=tuple(excluded))),),
                        base.recipe.runtime, f"tune: {base.name} with {len(excluded)} module(s) kept in float")
        c = Candidate(name, recipe, base.runtime, excluded=tuple(excluded))
        candidates.append(c)
        unnamed = f"; {', '.join(layer.unnamed)} (top level, no module name) may still quantize it" \
            if layer.unnamed else ""
        echo(f"keep {layer.producer or layer.tensor} in float (exclude {', '.join(new)}){unnamed}")
        try_candidate(search, c, echo)
        if c.within_budget:
            break
    return ranked
