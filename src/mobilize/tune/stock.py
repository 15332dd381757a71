"""What mobilize did better than a stock default, measured: ONNX Runtime static int8 with ``reduce_range``.

ONNX Runtime's ``quantize_static`` defaults to ``reduce_range=False``.  On an x86-64 target without VNNI its
U8S8 kernels saturate 16-bit sums of full 8-bit products, so mobilize turns reduce_range on there (the
exporter's note names the CPU feature, :meth:`mobilize.core.target.Target.int8_feature`).  When tune built such a
candidate it also builds the same candidate with the stock default, judges it on the same samples, and says
what the choice kept: the measured consequence, on the user's data.  Which runtime's candidates this applies to is
its route's :attr:`~mobilize.core.tune_route.TuneRoute.stock_reduce_range`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from mobilize.core.target import CHOSE
from mobilize.tune.candidates import Candidate
from mobilize.tune.routes import route
from mobilize.tune.search import Search, try_candidate


def stock_reduce_range(search: Search, candidates: list[Candidate],
                       echo: Callable[[str], None]) -> list[dict[str, Any]]:
    """Build and judge the stock-default twin of the first candidate that left reduce_range to the target.
    Returns the choice records (empty where the target does not need reduce_range)."""
    from mobilize.pipeline.recipe import Recipe, Step

    if not search.target.reduce_range:
        return []
    base = next((c for c in candidates if route(c.runtime).stock_reduce_range and c.path and c.verdict
                 and not c.excluded and not c.recipe.passes and c.recipe.exports
                 and _auto_static(c.recipe.exports[0].config)), None)
    if base is None:
        return []
    step = base.recipe.exports[0]
    name = f"{base.name}-stock-default"
    recipe = Recipe(name, (), (Step(step.name, dataclasses.replace(step.config, reduce_range=False)),),
                    base.recipe.runtime, f"tune: {base.name} with ONNX Runtime's default reduce_range (off)")
    twin = Candidate(name, recipe, base.runtime)
    echo(f"measure ONNX Runtime's stock default beside mobilize's choice: {name}")
    try_candidate(search, twin, echo)
    if twin.verdict is None:
        return []
    feature = search.target.int8_feature()
    if base.top1 is not None and twin.top1 is not None:
        effect = (f"top-1 {base.top1:.2f}% where ONNX Runtime's default (reduce_range off) gave {twin.top1:.2f}% "
                  f"({twin.verdict.outcome}) on the same {len(search.samples)} samples")
    else:
        effect = (f"cosine {base.cosine:.4f} where ONNX Runtime's default (reduce_range off) gave {twin.cosine:.4f} "
                  f"({twin.verdict.outcome}) on the same {len(search.samples)} samples")
    text = f"{CHOSE}reduce_range on for {base.name}, decided by the CPU feature: {feature}: {effect}"
    echo(text)
    return [{"choice": "reduce_range on (7-bit weights)", "stock_default": "reduce_range off (ONNX Runtime's "
             "quantize_static default)", "decided_by": feature, "candidate": base.name, "stock_candidate": twin.to_json(),
             "top1": base.top1, "stock_top1": twin.top1, "cosine": base.cosine, "stock_cosine": twin.cosine,
             "stock_outcome": str(twin.verdict.outcome), "line": text}]


def _auto_static(config: Any) -> bool:
    """An ONNX static int8 step that left reduce_range to the target (mobilize's choice, not the user's)."""
    return str(getattr(config, "quantize", "")) == "static" and getattr(config, "reduce_range", False) is None
