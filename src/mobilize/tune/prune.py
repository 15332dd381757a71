"""``tune --prune``: structured pruning levels join the search as candidates that change the model.

Each level is the ``prune`` pass (:mod:`mobilize.passes.prune`: structured, ``ratio`` of the MACs removed by
torch-pruning's dependency graph, BatchNorm re-estimated, then a fine-tune distilled from the unpruned model on
the labelled calibration data) followed by ONNX fp32 and ONNX static int8 (MinMax), judged against the
*unpruned* float model by the same budget as every other candidate.  The recipe written for a pruned winner
holds the prune step, so it rebuilds the file.

    >>> [name for name, _, _ in prune_recipes((0.3,), finetune_steps=5)]
    ['prune30-onnx-fp32', 'prune30-onnx-int8-minmax']
"""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.errors import ConfigError

DEFAULT_LEVELS = (0.3, 0.5)
"""Fractions of the MACs removed when ``--prune`` names no levels (30%: 1.25x on the default model after one
distilled epoch, benchmarks/compression.py)."""
FINETUNE_EPOCHS = 1


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


def prune_recipes(levels: Sequence[float], finetune_steps: int = 0, calibration_samples: int = 100,
                  finetune_samples: int = 1024) -> list[tuple[str, Any, str]]:
    """(name, recipe, runtime) per level: the pruned model as ONNX fp32, then as ONNX static int8."""
    from mobilize.recipe import Recipe

    out = []
    for ratio in levels:
        pct = round(100 * ratio)
        prune = {"prune": {"method": "structured", "ratio": ratio, "finetune_epochs": FINETUNE_EPOCHS, "distill": True,
                           "finetune_max_steps": finetune_steps, "finetune_samples": finetune_samples}}
        for suffix, export in (("onnx-fp32", "onnx"),
                               ("onnx-int8-minmax", {"onnx": {"quantize": "static", "calibration": "minmax",
                                                              "calibration_samples": calibration_samples}})):
            name = f"prune{pct}-{suffix}"
            out.append((name, Recipe.from_dict({"name": name, "description": f"tune: structured pruning of {pct}% "
                                                f"of the MACs, distilled fine-tune, {suffix}",
                                                "passes": [prune], "exports": [export]}, name), "onnxruntime"))
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
    return (f"{name}: MACs {pruned['macs_before']:,} -> {pruned['macs_after']:,} "
            f"(-{pruned['macs_reduction_percent']:.1f}%), params {pruned['params_before']:,} -> "
            f"{pruned['params_after']:,} (-{pruned['params_reduction_percent']:.1f}%), {acc}")
