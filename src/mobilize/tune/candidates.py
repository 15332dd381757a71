"""A candidate of the search (one recipe tried) and the recipes the search starts from, one route per runtime.

    >>> [(name, runtime) for name, _, runtime in candidate_recipes(["litert"])]
    [('litert-fp32', 'litert'), ('litert-int8', 'litert')]
    >>> prune_key(onnx_recipe("onnx-fp32"))
    ''
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from mobilize.accuracy.verify import Kind, Verdict
from mobilize.core.tune_route import Start
from mobilize.tune.routes import route


@dataclasses.dataclass
class Candidate:
    """One recipe tried by the search."""

    name: str
    recipe: Any
    """A :class:`mobilize.pipeline.recipe.Recipe`."""
    runtime: str
    path: Path | None = None
    kind: Kind = Kind.FLOAT
    verdict: Verdict | None = None
    top1: float | None = None
    drop_points: float | None = None
    drop_ci: tuple[float, float] | None = None
    cosine: float | None = None
    excluded: tuple[str, ...] = ()
    """Kept in float: node names (ONNX int8) or module names (ExecuTorch int8, the step's ``exclude``)."""
    round_medians_ms: list[float] = dataclasses.field(default_factory=list)
    latency_ms_p50: float | None = None
    build_s: float = 0.0
    lost: str | None = None
    """Why it is not the winner (None for the winner)."""
    error: str | None = None
    measure: dict[str, Any] | None = None
    """The task's own measure against the float model (mobilize.accuracy.tasks), where top-1 does not say it."""
    top1_ci: tuple[float, float] | None = None
    """95% bootstrap interval of ``top1`` over the samples."""
    pruned: dict[str, Any] | None = None
    """For a pruned candidate: MACs and parameters before/after, the fine-tune (:func:`mobilize.tune.prune.facts`)."""
    built_recipe: Any = None
    """``recipe`` as built, what the target decided written in (:attr:`mobilize.pipeline.build.BuildResult.recipe`):
    the winner's recipe file is this one, so it rebuilds the winner's file on any machine."""

    @property
    def within_budget(self) -> bool:
        return self.verdict is not None and self.verdict.ok

    def to_json(self) -> dict[str, Any]:
        data = {"name": self.name, "runtime": self.runtime, "kind": str(self.kind),
                "path": str(self.path) if self.path else None, "recipe": (self.built_recipe or self.recipe).to_dict(),
                "verdict": self.verdict.to_json() if self.verdict else None, "top1": self.top1,
                "top1_ci": list(self.top1_ci) if self.top1_ci else None, "top1_drop_points": self.drop_points, "top1_drop_ci": list(self.drop_ci) if self.drop_ci else None,
                "cosine": self.cosine, "excluded_nodes": list(self.excluded), "latency_ms_p50": self.latency_ms_p50,
                "round_medians_ms": self.round_medians_ms, "build_s": round(self.build_s, 3), "lost": self.lost,
                "error": self.error, "pruned": self.pruned, **({"task_measure": self.measure} if self.measure else {})}
        if self.measure is not None and self.top1 is None:  # no classes: no top-1 figures
            data = {k: v for k, v in data.items() if "top1" not in k}
        return data


def recipe_hash(recipe: Any) -> str:
    return hashlib.sha256(json.dumps(recipe.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:16]


def export_recipe(name: str, exporter: str, **options: Any) -> Any:
    """A one-step recipe: ``exporter`` with ``options`` (none: its defaults)."""
    from mobilize.pipeline.recipe import Recipe

    step = {exporter: options} if options else exporter
    return Recipe.from_dict({"name": name, "description": f"tune: {name}", "exports": [step]}, name)


def onnx_recipe(name: str, **options: Any) -> Any:
    return export_recipe(name, "onnx", **options)


def start_recipe(start: Start, calibration_samples: int) -> Any:
    """The recipe of one of a route's starting points."""
    from mobilize.pipeline.recipe import load_recipe

    if start.recipe:
        return load_recipe(start.recipe)
    extra = {"calibration_samples": calibration_samples} if start.calibrated else {}
    return export_recipe(start.name, start.export, **start.options, **extra)


def candidate_recipes(runtimes: Sequence[str], calibration_samples: int = 100) -> list[tuple[str, Any, str]]:
    """(name, recipe, runtime) of the search's starting points, fp32 first for each runtime (its route's starts)."""
    return [(s.name, start_recipe(s, calibration_samples), rt) for rt in runtimes for s in route(rt).starts]


def prune_key(recipe: Any) -> str:
    """The configuration of ``recipe``'s leading prune pass ('' when it does not start with one)."""
    passes = recipe.passes
    if not passes or passes[0].name != "prune":
        return ""
    return json.dumps(passes[0].to_dict(), sort_keys=True, default=str)
