"""State of one search (the float model, the evaluation samples, the artifact cache) and how one candidate is
built and judged.

Built artifacts are cached by the hash of their recipe, so a recipe reached twice is built once.  Where a route
says so (:attr:`~mobilize.core.tune_route.TuneRoute.int8_from_fp32_file`), int8 candidates quantize the fp32 twin's
file built once after the same passes; a pruned model is pruned and fine-tuned once per configuration.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from mobilize.accuracy.verify import Kind, Policy
from mobilize.core.errors import ConfigError
from mobilize.tune.candidates import Candidate, prune_key, recipe_hash
from mobilize.tune.routes import route


class Search:
    """State of one search: the float model, the evaluation samples, the artifact cache."""

    def __init__(self, module: Any, specs: list, data: str, calibration: str | None, out_dir: Path, stem: str,
                 policy: Policy, echo: Callable[[str], None], eval_samples: int, task: str | None = None,
                 metric: str | None = None, target: str = "host"):
        import torch

        from mobilize.core.target import Target

        self.target = Target.parse(target)

        from mobilize.runtimes.base import flatten_outputs
        from mobilize.sources.data import open_data

        self.module, self.specs, self.policy, self.echo = module, specs, policy, echo
        self.out_dir, self.stem = out_dir, stem
        self.work = out_dir / "tune-cache"
        self.work.mkdir(parents=True, exist_ok=True)
        self.calibration = calibration or data
        from mobilize.sources.bound import tensor_input_names

        source = open_data(data)
        self.names = tensor_input_names(module, len(specs))
        self.samples, self.labels = source.labelled_sample_lists(specs, eval_samples, self.names or None)
        if not self.samples:
            raise ConfigError(f"data source '{data}' gave no samples")
        with torch.inference_mode():
            self.reference = [flatten_outputs(module(*s)) for s in self.samples]
        from mobilize.accuracy.verify import degenerate_reference

        from mobilize.accuracy.tasks import reference_task

        self.task, self.metric = reference_task(task, metric, self.reference, self.labels), metric
        self.reference_warning = degenerate_reference(self.reference, policy, task=self.task.task)
        """Set when the float model's output does not depend on its input: every verdict is then VACUOUS."""
        self.reference_correct = None
        classes = self.reference[0][0].numel() if self.reference and self.reference[0] else 0
        top1 = self.task.task == "classification" and not metric  # else judged on the task's own measure
        if top1 and self.labels is not None and max(self.labels) >= classes:
            raise ConfigError(f"data source '{data}' has label {max(self.labels)}, but the model gives {classes} "
                              f"output value(s) per sample: its labels are not this model's classes",
                              hint="give data labelled with the model's own class indices, or unlabelled data "
                                   "and --min-cosine")
        if top1 and self.labels is not None:
            self.reference_correct = [int(r[0].reshape(-1).argmax()) == y for r, y in zip(self.reference, self.labels)]
        self.cache: dict[str, tuple[Path, Kind, Any]] = {}
        self.longest_s = 0.0
        """The longest a candidate (build + judge) has taken: the time budget stops before a step this long."""
        self.fp32_after: dict[tuple[str, str], Path] = {}
        """The fp32 twin's file per (runtime, sequence of passes) ("" for none), for routes whose int8 candidates
        quantize it, built once."""
        self.pruned: dict[str, dict[str, Any] | None] = {}
        """What each prune configuration did (:func:`mobilize.tune.prune.facts`), by :func:`prune_key`."""
        self.pruned_modules: dict[str, Any] = {}
        """The pruned, fine-tuned model per prune configuration: made once, exported by every runtime's candidate."""

    @property
    def reference_top1(self) -> float | None:
        return None if self.reference_correct is None else 100.0 * sum(self.reference_correct) / len(self.reference_correct)

    def context(self) -> Any:
        from mobilize.core.context import Context
        from mobilize.sources.data import open_data

        return Context(input_specs=list(self.specs), data=open_data(self.calibration), input_names=list(self.names),
                       bound_args=dict(getattr(self.module, "bound_args", None) or {}), target=self.target)

    def build(self, c: Candidate) -> None:
        """Build (or take from the cache) and judge one candidate."""
        from mobilize.pipeline.build import build

        key = recipe_hash(c.recipe)
        passes = json.dumps([p.to_dict() for p in c.recipe.passes], sort_keys=True, default=str) \
            if c.recipe.passes else ""
        shares = route(c.runtime).int8_from_fp32_file
        fp32 = shares and c.name.endswith(route(c.runtime).fp32_twin)
        pruning = prune_key(c.recipe)
        t0 = time.perf_counter()
        if key not in self.cache:
            # int8 variants of such a route quantize the fp32 file built once after the same passes (same graph)
            source, recipe = self.module, c.recipe
            if shares and (c.runtime, passes) in self.fp32_after and not fp32:
                from mobilize.core.artifact import Artifact
                from mobilize.core.backend import format_for_suffix

                built_fp32 = self.fp32_after[(c.runtime, passes)]
                source = Artifact(path=built_fp32, format=format_for_suffix(built_fp32.suffix),
                                  input_specs=list(self.specs))
                recipe = dataclasses.replace(c.recipe, passes=())
            elif pruning:  # pruned and fine-tuned once per configuration; each runtime exports that model
                source, recipe = self.pruned_module(c.recipe), dataclasses.replace(c.recipe,
                                                                                   passes=c.recipe.passes[1:])
            result = build(source, recipe, self.context(), self.work / f"{self.stem}-{key}", made_by=c.recipe)
            built = result.artifacts[0]
            # what it promises vs the float model: a pruned model, and every file made from it, is changed
            kind = Kind.CHANGED if pruning else result.kind
            self.cache[key] = (built.artifact.path, kind, result.recipe)
        c.path, c.kind, c.built_recipe = self.cache[key]
        c.pruned = self.pruned.get(pruning) if pruning else None
        if fp32:
            self.fp32_after[(c.runtime, passes)] = c.path
        c.build_s = time.perf_counter() - t0
        self.judge(c)

    def pruned_module(self, recipe: Any) -> Any:
        """The float model after ``recipe``'s leading prune pass (pruning, BatchNorm re-estimation, the distilled
        fine-tune), made on the first call per prune configuration."""
        from mobilize.pipeline.build import prepare
        from mobilize.tune.prune import facts

        pruning = prune_key(recipe)
        if pruning not in self.pruned_modules:
            ctx = self.context()
            self.pruned_modules[pruning] = prepare(self.module, dataclasses.replace(recipe, passes=recipe.passes[:1]),
                                                   ctx)
            self.pruned[pruning] = facts(ctx.details.get("prune"))
        return self.pruned_modules[pruning]

    def outputs(self, path: Path, samples: Sequence[Sequence[Any]] | None = None) -> list[list[Any]]:
        from mobilize.runtimes.base import open_session

        from mobilize.tune.timing import artifact

        with open_session(artifact(path, self.specs), threads=1) as session:
            return [session.run(s) for s in (samples if samples is not None else self.samples)]

    def judge(self, c: Candidate) -> None:
        from mobilize.accuracy.metrics import compare_outputs
        from mobilize.accuracy.stats import mean_ci
        from mobilize.accuracy.tasks import apply_task
        from mobilize.accuracy.verify import assess

        outputs = self.outputs(c.path)
        comparison = compare_outputs(outputs, self.reference, self.labels)
        apply_task(comparison, self.task.task, outputs, self.reference, self.labels, self.metric)
        assessment = assess(comparison, c.kind, self.policy, reference_correct=self.reference_correct,
                            reference_warning=self.reference_warning)
        c.verdict, c.cosine = assessment.verdict, comparison.cosine_mean
        c.drop_points, c.drop_ci = assessment.drop_points, assessment.drop_ci
        if assessment.drop_points is not None:
            c.top1 = comparison.top1
            c.top1_ci = mean_ci([100.0 * bool(x) for x in comparison.correct])
        if comparison.task_measure is not None:
            c.measure = comparison.task_measure.to_json()


def try_candidate(search: Search, c: Candidate, echo: Callable[[str], None]) -> None:
    """Build and judge ``c``; a recipe that does not apply to this model makes it a lost candidate."""
    from mobilize.core.errors import MobilizeError

    echo(f"build {c.name}")
    t0 = time.perf_counter()
    try:
        search.build(c)
    except MobilizeError as exc:  # a recipe that does not apply to this model is a lost candidate, not a failure
        c.error = str(exc).splitlines()[0]
        c.lost = f"failed: {c.error}"
        echo(f"  {c.name}: {c.lost}")
        return
    finally:
        search.longest_s = max(search.longest_s, time.perf_counter() - t0)
    echo(f"  {c.name}: {c.verdict.outcome} ({c.verdict.reason})")
