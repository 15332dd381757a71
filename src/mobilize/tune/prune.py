"""``tune --prune``: structured pruning levels join the search as candidates that change the model.

Each level is the ``prune`` pass (:mod:`mobilize.passes.prune`: structured, ``ratio`` of the MACs removed by
torch-pruning's dependency graph, BatchNorm re-estimated, then a fine-tune distilled from the unpruned model on
the labelled calibration data) followed by every searched runtime's fp32 and int8 candidate (those its route
marks :attr:`~mobilize.core.tune_route.Start.prune`; ONNX: MinMax calibration only), judged against the *unpruned* float model by the same budget as every other candidate.  The
search prunes and fine-tunes once per level and exports that model for each runtime.  The recipe written for a
pruned winner holds the prune step, so it rebuilds the file.

    >>> from mobilize.tune import candidate_recipes
    >>> [name for name, _, _ in prune_recipes((0.3,), candidate_recipes(["onnxruntime", "litert"]))]
    ['prune30-onnx-fp32', 'prune30-onnx-int8-minmax', 'prune30-litert-fp32', 'prune30-litert-int8']
"""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.core.errors import ConfigError

DEFAULT_LEVELS = (0.3, 0.5, 0.7)
"""Fractions of the MACs removed when ``--prune`` names no levels.  Measured on the default model (LiteRT fp32,
2 threads, one interleaved loop, 2-core AMD EPYC): 50% of the MACs runs at 0.73x the unpruned file's time, 60%
at 0.61x, 70% at 0.53x; after :data:`FINETUNE` (top-1 on all 539 digits:test samples, float 98.89%) 60% kept
97.96%, 65% 97.96%, 70% 98.33%, within a point, so the deepest default level is 70%.  Each level costs its
fine-tune (~85 s here) and one export per searched candidate."""
FINETUNE = {"finetune_epochs": 8, "finetune_lr": 2e-3, "distill_weight": 0.8, "finetune_samples": 100_000}
"""The distilled fine-tune of every level: 8 epochs over all the labelled --calibration samples, Adam at 2e-3,
the loss 0.8 distillation + 0.2 cross-entropy.  Measured on the default model pruned by 50% of its MACs (top-1
on all 539 digits:test samples, float 98.89%, trained on the 1,258 of digits:train, 2-core AMD EPYC): one epoch
at the pass's defaults (5e-4, 0.5) 94.99%; 3 epochs 96.66%; 10 epochs 97.22%; 8 epochs at 2e-3 and 0.8 98.70%
(90 s), 5 epochs 98.14%; Taylor importance with 1e-3 98.52%.  70% of the MACs at the same settings: 97.22%.
Those runs drew dropout from the script's seed; with the fine-tune's own seed (tune, benchmarks/p1.py) 50%
gives 97.77% and 30% 98.70%."""
FINETUNE_MAX_STEPS = 2000
"""tune's default cap on each level's fine-tune (``--prune-steps``): 2,000 steps of 32 samples, 64,000 samples.
The default model's 8 epochs over 1,258 samples take 320 steps (~60 s on a 2-core AMD EPYC); with tens of
thousands of labelled samples, 8 epochs would take hours per level, the cap about 6 minutes there."""


def parse_levels(text: str | None) -> tuple[float, ...]:
    """``--prune`` (no value: the defaults) or ``--prune 0.3,0.5``."""
    if text is None or text == "":
        return DEFAULT_LEVELS
    try:
        levels = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"cannot read --prune '{text}'", hint="give fractions of the MACs to remove, e.g. 0.3,0.5")
    if not levels or not all(0 < x < 1 for x in levels):
        raise ConfigError(f"--prune levels must be between 0 and 1 (exclusive), got '{text}'",
                          hint="give fractions of the MACs to remove, e.g. 0.3,0.5")
    return levels


def prune_recipes(levels: Sequence[float], base: Sequence[tuple[str, Any, str]],
                  finetune_steps: int = 0) -> list[tuple[str, Any, str]]:
    """(name, recipe, runtime) per level and per candidate of ``base`` (:func:`mobilize.tune.candidate_recipes`)
    whose route's start says :attr:`~mobilize.core.tune_route.Start.prune`: the prune pass first, then that
    candidate's own passes and export."""
    import dataclasses

    from mobilize.passes import PASSES
    from mobilize.pipeline.recipe import parse_step
    from mobilize.tune.routes import route

    pruned_starts = {s.name for rt in dict.fromkeys(r for _, _, r in base) for s in route(rt).starts if s.prune}

    out = []
    for ratio in levels:
        pct = round(100 * ratio)
        config = {"method": "structured", "ratio": ratio, "distill": True, **FINETUNE,
                  "finetune_max_steps": finetune_steps}
        prune = parse_step(PASSES, {"prune": config}, "pass")
        for name, recipe, runtime in base:
            if name not in pruned_starts:
                continue
            pruned = f"prune{pct}-{name}"
            out.append((pruned, dataclasses.replace(recipe, name=pruned, passes=(prune, *recipe.passes),
                                                    description=f"tune: structured pruning of {pct}% of the MACs, "
                                                                f"distilled fine-tune, then {recipe.description}"),
                        runtime))
    return out


def facts(details: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the report says about a pruned file: MACs, parameters, and the fine-tune."""
    if not details:
        return None
    keys = ("macs_before", "macs_after", "macs_reduction_percent", "params_before", "params_after",
            "params_reduction_percent", "ratio_target_percent", "finetune", "macs_counter")
    return {k: details.get(k) for k in keys}


def line(name: str, pruned: dict[str, Any], top1: float | None, top1_ci: Sequence[float] | None) -> str:
    acc = (f"top-1 {top1:.2f}% (95% CI {top1_ci[0]:.2f}-{top1_ci[1]:.2f})" if top1 is not None and top1_ci else
           "no labels: top-1 not measured")
    ft = pruned.get("finetune") or {}
    steps = f", fine-tuned {ft['steps']} steps ({ft['epochs']} epoch(s))" if ft.get("steps") else ""
    return (f"{name}: MACs {pruned['macs_before']:,} -> {pruned['macs_after']:,} "
            f"(-{pruned['macs_reduction_percent']:.1f}%), params {pruned['params_before']:,} -> "
            f"{pruned['params_after']:,} (-{pruned['params_reduction_percent']:.1f}%), {acc}{steps}")
