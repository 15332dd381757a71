"""``mobilize tune``: the fastest artifact within an accuracy budget.

The search builds every candidate recipe (ONNX fp32; ONNX static int8 with MinMax, Entropy and
Percentile calibration; ExecuTorch and LiteRT fp32 and int8 when asked for), checks each against the float
model on real samples with the verify core (:func:`mobilize.accuracy.verify.assess`, as compare judges, with
the user's :class:`~mobilize.accuracy.verify.Policy`), and when an ONNX int8 candidate misses
the budget it localises the layers that cost accuracy (:mod:`mobilize.backends.onnxruntime.drift`) and keeps
the worst of them in float, one more at a time, until the budget holds; the same for ExecuTorch
int8 (:mod:`mobilize.backends.executorch.drift`, the modules named in the executorch step's ``exclude``).  Every candidate within
budget is then timed in interleaved rounds (:func:`mobilize.bench.rounds.schedule`); the winner is
the lowest geometric mean of its round medians, and its lead over the runner-up is tested on the paired round
medians (:func:`mobilize.accuracy.stats.ratio_ci`, the same estimator): when the interval contains 1.0 the report
names the tie (:mod:`mobilize.tune.timing`, which also finds the best thread count for the winner).  With
``prune`` levels, structured pruning with a distilled fine-tune joins the search (:mod:`mobilize.tune.prune`);
where mobilize departs from ONNX Runtime's default for the target CPU it measures the default beside it
(:mod:`mobilize.tune.stock`).

Built artifacts are cached by the hash of their recipe, so a recipe reached twice is built once.
Ctrl-C (or the time budget) stops the search and keeps the best found so far.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from mobilize.accuracy.verify import DEFAULT_POLICY, Kind, Policy, Verdict
from mobilize.core.errors import ConfigError
from mobilize.tune.prune import FINETUNE_MAX_STEPS

RUNTIMES = ("onnxruntime", "executorch", "litert")
CALIBRATIONS = ("minmax", "entropy", "percentile")
EVAL_SAMPLES = 200
"""Labelled samples every candidate is judged on (the same for all, so differences are paired)."""
DRIFT_SAMPLES = 32
"""Samples the per-layer localisation runs on."""
MAX_EXCLUSIONS = 8
"""Greedy exclusion stops after keeping this many layers in float."""
ROUNDS = 7
ITERATIONS = 20


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

    @property
    def within_budget(self) -> bool:
        return self.verdict is not None and self.verdict.ok

    def to_json(self) -> dict[str, Any]:
        data = {"name": self.name, "runtime": self.runtime, "kind": str(self.kind),
                "path": str(self.path) if self.path else None, "recipe": self.recipe.to_dict(),
                "verdict": self.verdict.to_json() if self.verdict else None, "top1": self.top1,
                "top1_ci": list(self.top1_ci) if self.top1_ci else None, "top1_drop_points": self.drop_points, "top1_drop_ci": list(self.drop_ci) if self.drop_ci else None,
                "cosine": self.cosine, "excluded_nodes": list(self.excluded), "latency_ms_p50": self.latency_ms_p50,
                "round_medians_ms": self.round_medians_ms, "build_s": round(self.build_s, 3), "lost": self.lost,
                "error": self.error, "pruned": self.pruned, **({"task_measure": self.measure} if self.measure else {})}
        if self.measure is not None and self.top1 is None:  # no classes: no top-1 figures
            data = {k: v for k, v in data.items() if "top1" not in k}
        return data


@dataclasses.dataclass
class TuneResult:
    candidates: list[Candidate]
    winner: Candidate | None
    reference_top1: float | None
    tie_with: list[str]
    """Candidates whose speed the winner's does not beat significantly (paired rounds, 95%)."""
    layers: dict[str, list[Any]]
    """Per-layer drift tables (candidate name -> ranked :class:`~mobilize.backends.onnxruntime.drift.LayerError`, or
    :class:`~mobilize.backends.executorch.drift.LayerError` for ExecuTorch)."""
    interrupted: bool
    search_s: float
    files: list[Path] = dataclasses.field(default_factory=list)
    diagnoses: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """"Why is int8 not faster" for int8 candidates no faster than their fp32 twin."""
    profiles: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Time-weighted per-op profiles (candidate name -> :class:`~mobilize.profile.TimeProfile` JSON)."""
    cut_short: list[str] = dataclasses.field(default_factory=list)
    """What the time budget left out (each line says how much time was left and what was not done)."""
    task: dict[str, Any] | None = None
    """The model's task, given with --task or guessed (mobilize.accuracy.tasks.TaskChoice's JSON)."""
    threads: dict[str, Any] | None = None
    """The winner at 1..cores threads and the best count (:func:`mobilize.tune.timing.best_threads`)."""
    choices: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Where mobilize departed from a stock default for the target CPU, with the default measured beside it."""

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "winner": self.winner.name if self.winner else None, "tie_with": self.tie_with,
                "interrupted": self.interrupted,
                "search_s": round(self.search_s, 2), "candidates": [c.to_json() for c in self.candidates],
                "layers": {k: [l.to_json() for l in v] for k, v in self.layers.items()},
                "diagnoses": self.diagnoses, "profiles": self.profiles, "cut_short": self.cut_short,
                "threads": self.threads, "choices": self.choices,
                "files": [str(p) for p in self.files]} | (
            {} if (self.task or {}).get("name") not in (None, "classification") and self.reference_top1 is None
            else {"reference_top1": self.reference_top1})


def format_layers(layers: Sequence[Any], top: int = 10) -> list[str]:
    """The ranked per-layer table of any route (ONNX tensors, ExecuTorch modules), by the drift module that made it."""
    import sys

    if not layers:
        return []
    return sys.modules[type(layers[0]).__module__].format_table(layers, top)


def recipe_hash(recipe: Any) -> str:
    return hashlib.sha256(json.dumps(recipe.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:16]


def onnx_recipe(name: str, **options: Any) -> Any:
    from mobilize.pipeline.recipe import Recipe

    step = {"onnx": options} if options else "onnx"
    return Recipe.from_dict({"name": name, "description": f"tune: {name}", "exports": [step]}, name)


def candidate_recipes(runtimes: Sequence[str], calibration_samples: int = 100) -> list[tuple[str, Any, str]]:
    """(name, recipe, runtime) of the search's starting points, fp32 first for each runtime."""
    from mobilize.pipeline.recipe import load_recipe

    out: list[tuple[str, Any, str]] = []
    for rt in runtimes:
        if rt == "onnxruntime":
            out.append(("onnx-fp32", onnx_recipe("onnx-fp32"), rt))
            for cal in CALIBRATIONS:
                out.append((f"onnx-int8-{cal}", onnx_recipe(f"onnx-int8-{cal}", quantize="static", calibration=cal,
                                                            calibration_samples=calibration_samples), rt))
        elif rt in ("executorch", "litert"):
            for precision in ("fp32", "int8"):
                out.append((f"{rt}-{precision}", load_recipe(f"{rt}-{precision}"), rt))
        else:
            raise ConfigError(f"tune does not search runtime '{rt}'", hint=f"choose from: {', '.join(RUNTIMES)}")
    return out


def prune_key(recipe: Any) -> str:
    """The configuration of ``recipe``'s leading prune pass ('' when it does not start with one)."""
    passes = recipe.passes
    if not passes or passes[0].name != "prune":
        return ""
    return json.dumps(passes[0].to_dict(), sort_keys=True, default=str)


class _Search:
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
        self.cache: dict[str, tuple[Path, Kind]] = {}
        self.longest_s = 0.0
        """The longest a candidate (build + judge) has taken: the time budget stops before a step this long."""
        self.fp32_onnx_after: dict[str, Path] = {}
        """The fp32 ONNX file per sequence of passes ("" for none): int8 candidates quantize it, built once."""
        self.pruned: dict[str, dict[str, Any] | None] = {}
        """What each prune configuration did (:func:`mobilize.tune.prune.facts`), by :func:`prune_key`."""
        self.pruned_modules: dict[str, Any] = {}
        """The pruned, fine-tuned model per prune configuration: made once, exported by every runtime's candidate."""

    @property
    def fp32_onnx(self) -> Path | None:
        return self.fp32_onnx_after.get("")

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
        fp32 = c.name.endswith("onnx-fp32")
        pruning = prune_key(c.recipe)
        t0 = time.perf_counter()
        if key not in self.cache:
            # ONNX int8 variants quantize the fp32 ONNX file built once after the same passes (same graph)
            source, recipe = self.module, c.recipe
            if c.runtime == "onnxruntime" and passes in self.fp32_onnx_after and not fp32:
                from mobilize.core.artifact import Artifact

                source = Artifact(path=self.fp32_onnx_after[passes], format="onnx", input_specs=list(self.specs))
                recipe = dataclasses.replace(c.recipe, passes=())
            elif pruning:  # pruned and fine-tuned once per configuration; each runtime exports that model
                source, recipe = self.pruned_module(c.recipe), dataclasses.replace(c.recipe,
                                                                                   passes=c.recipe.passes[1:])
            result = build(source, recipe, self.context(), self.work / f"{self.stem}-{key}", made_by=c.recipe)
            built = result.artifacts[0]
            # what it promises vs the float model: a pruned model, and every file made from it, is changed
            kind = Kind.CHANGED if pruning else result.kind
            self.cache[key] = (built.artifact.path, kind)
        c.path, c.kind = self.cache[key]
        c.pruned = self.pruned.get(pruning) if pruning else None
        if fp32 and c.runtime == "onnxruntime":
            self.fp32_onnx_after[passes] = c.path
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


def tune(module: Any, input_specs: Sequence[Any], *, data: str, calibration: str | None = None,
         policy: Policy = DEFAULT_POLICY, runtimes: Sequence[str] = ("onnxruntime",), out_dir: Any = "out",
         stem: str = "model", time_budget_s: float | None = None, eval_samples: int = EVAL_SAMPLES,
         calibration_samples: int = 100, max_exclusions: int = MAX_EXCLUSIONS, rounds: int = ROUNDS,
         iterations: int = ITERATIONS, echo: Callable[[str], None] = lambda _text: None, target: str = "host",
         prune: Sequence[float] = (), prune_finetune_steps: int = FINETUNE_MAX_STEPS, thread_search: bool = True, task: str | None = None,
         metric: str | None = None) -> TuneResult:
    """Search recipes for the fastest artifact within ``policy``'s budget; write it, its recipe and a report.

    ``data`` gives the (labelled, if possible) samples every candidate is judged on; ``calibration``
    the samples int8 ranges are calibrated on (default: ``data``), and the labelled samples a pruned
    candidate's distilled fine-tune trains on.  ``prune``: fractions of the MACs structured pruning removes, one
    level each (:mod:`mobilize.tune.prune`; ``prune_finetune_steps`` caps each level's fine-tune, 0: no cap).
    ``target`` decides CPU-dependent choices (``--target``).  ``thread_search``: time the winner at 1..cores
    threads and state the best count.  ``task``/``metric``: the measure the budget is judged on
    (:mod:`mobilize.accuracy.tasks`; None: guessed from the float model's outputs)."""
    from mobilize.pipeline.recipe import dump_recipe
    from mobilize.report.tune_html import write_tune_html

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    search = _Search(module, list(input_specs), data, calibration, out, stem, policy, echo, eval_samples, task, metric,
                     target)
    echo(search.task.describe())
    candidates: list[Candidate] = []
    layers: dict[str, list[Any]] = {}
    interrupted = False
    if search.reference_warning:
        echo(search.reference_warning)

    cut: list[str] = []
    choices: list[dict[str, Any]] = []

    def out_of_time(what: str = "the exclusion search stopped") -> bool:
        """Whether the next step would overrun: less time is left than the longest candidate took so far (a budget
        is kept to within one candidate's duration).  Says what it cut, once per cut."""
        if time_budget_s is None:
            return False
        left = time_budget_s - (time.perf_counter() - start)
        if left > search.longest_s:
            return False
        line = (f"time budget: {max(left, 0):.0f} s left of {time_budget_s:g} s, less than the longest candidate "
                f"so far ({search.longest_s:.0f} s): {what}")
        if line not in cut:
            cut.append(line)
            echo(line)
        return True

    try:
        from mobilize.tune.prune import prune_recipes

        recipes = candidate_recipes(runtimes, calibration_samples)
        recipes += prune_recipes(prune, recipes, prune_finetune_steps) if prune else []
        for name, recipe, runtime in recipes:
            if out_of_time(f"{name} and later candidates not tried"):
                break
            c = Candidate(name, recipe, runtime)
            candidates.append(c)
            _try(search, c, echo)
        # int8 ONNX over budget: keep the worst layers in float, greedily, for the best-calibrated variant
        vacuous = search.reference_warning is not None  # no drift to localise against a near-constant output
        onnx_int8 = [c for c in candidates if c.name.startswith("onnx-int8") and c.path and c.verdict and not vacuous]
        if onnx_int8 and not any(c.within_budget for c in onnx_int8) and search.fp32_onnx and not out_of_time():
            base = max(onnx_int8, key=lambda c: (c.verdict.outcome != "MISMATCH", c.top1 or 0.0,
                                                 (c.measure or {}).get("value") or 0.0, c.cosine or 0.0))
            layers[base.name] = _exclude_greedily(search, base, candidates, max_exclusions, out_of_time, echo)
        # the same for ExecuTorch int8: keep the worst modules in float (the executorch step's exclude)
        et_int8 = [c for c in candidates if c.name == "executorch-int8" and c.path and c.verdict and not vacuous]
        if et_int8 and not et_int8[0].within_budget and not out_of_time():
            layers[et_int8[0].name] = _exclude_modules_greedily(search, et_int8[0], candidates, max_exclusions,
                                                                out_of_time, echo)
        if not out_of_time("ONNX Runtime's stock default not measured beside mobilize's choice"):
            from mobilize.tune.stock import stock_reduce_range

            choices = stock_reduce_range(search, candidates, Candidate, _try, echo)
    except KeyboardInterrupt:
        interrupted = True
        echo("interrupted: keeping the best candidate found so far")

    from mobilize.tune.timing import best_threads, choose

    winner, tie_with = choose(candidates, search.samples[0], rounds, iterations, interrupted, echo)
    result = TuneResult(candidates, winner, search.reference_top1, tie_with, layers, interrupted,
                        time.perf_counter() - start, cut_short=cut, choices=choices,
                        task=search.task.to_json())
    if winner is not None and thread_search and not interrupted and not out_of_time("no thread-count search"):
        from mobilize.core.target import host_cpu

        result.threads = best_threads(winner.path, search.samples[0], host_cpu().cores, rounds, iterations)
        echo(result.threads["line"])
    if not interrupted and not out_of_time("no diagnosis of slow int8 candidates, no time profiles"):
        result.diagnoses = _diagnose(candidates, search, echo)
    if winner is not None:
        artifact = out / f"{stem}-tune{winner.path.suffix}"
        shutil.copyfile(winner.path, artifact)
        recipe = out / f"{stem}-tune.yaml"
        dump_recipe(winner.recipe, recipe)
        result.files += [artifact, recipe]
    if not interrupted and not out_of_time("no time profiles"):
        result.profiles = _profiles(candidates, search, echo)
    report = out / "tune-report.json"
    html = out / "tune-report.html"
    result.files += [report, html]
    report.write_text(json.dumps({**result.to_json(), "policy": policy.to_json(search.task.task),
                                  "reference_warning": search.reference_warning}, indent=2, default=str) + "\n")
    write_tune_html(report)
    return result


def _try(search: _Search, c: Candidate, echo: Callable[[str], None]) -> None:
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


def _exclude_greedily(search: _Search, base: Candidate, candidates: list[Candidate], limit: int,
                      out_of_time: Callable[[], bool], echo: Callable[[str], None]) -> list[Any]:
    """Localise ``base``'s drift, then keep the worst layers in float one more at a time until the budget holds."""
    import dataclasses as dc

    from mobilize.pipeline.recipe import Recipe, Step
    from mobilize.backends import drift_for

    onnx_drift = drift_for("onnx")

    pre = onnx_drift.preprocessed_float(search.fp32_onnx, search.work / f"{search.stem}-fp32-pre.onnx")
    feeds = onnx_drift.feeds_for(pre, search.context().calibration_inputs(DRIFT_SAMPLES))
    ranked = onnx_drift.localise(pre, base.path, feeds)
    echo(f"per-layer drift of {base.name} on {len(feeds)} samples (worst first):")
    for line in onnx_drift.format_table(ranked):
        echo("  " + line)
    step = base.recipe.exports[0]
    excluded: list[str] = []
    for k, layer in enumerate(ranked[:limit], 1):
        if out_of_time():
            break
        new = [n for n in layer.nodes if n not in excluded]
        if not new:
            continue
        excluded += new
        config = dc.replace(step.config, exclude_nodes=tuple(excluded))
        name = f"{base.name}-float{k}"
        recipe = Recipe(name, (), (Step("onnx", config),), base.recipe.runtime,
                        f"tune: {base.name} with {len(excluded)} node(s) kept in float")
        c = Candidate(name, recipe, base.runtime, excluded=tuple(excluded))
        candidates.append(c)
        echo(f"keep {layer.tensor} in float ({', '.join(new)})")
        _try(search, c, echo)
        if c.within_budget:
            break
    return ranked


def _exclude_modules_greedily(search: _Search, base: Candidate, candidates: list[Candidate], limit: int,
                              out_of_time: Callable[[], bool], echo: Callable[[str], None]) -> list[Any]:
    """ExecuTorch int8: localise ``base``'s drift on its PT2E graph, then keep the worst layers' modules in float
    (``exclude``), one more layer at a time, until the budget holds."""
    import dataclasses as dc

    from mobilize.pipeline.recipe import Recipe, Step
    from mobilize.backends import drift_for

    et_drift = drift_for("executorch")

    step = base.recipe.exports[0]
    ctx = search.context()
    calibration = ctx.calibration_inputs(step.config.calibration_samples)  # the samples the exporter calibrates on
    samples = ctx.calibration_inputs(DRIFT_SAMPLES)
    ranked = et_drift.localise(search.module, ctx.example_inputs(), calibration, samples, step.config.per_channel,
                               step.config.exclude)
    echo(f"per-layer drift of {base.name} on {len(samples)} samples (worst first):")
    for line in et_drift.format_table(ranked):
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
        recipe = Recipe(name, base.recipe.passes, (Step(step.name, dc.replace(step.config, exclude=tuple(excluded))),),
                        base.recipe.runtime, f"tune: {base.name} with {len(excluded)} module(s) kept in float")
        c = Candidate(name, recipe, base.runtime, excluded=tuple(excluded))
        candidates.append(c)
        unnamed = f"; {', '.join(layer.unnamed)} (top level, no module name) may still quantize it" \
            if layer.unnamed else ""
        echo(f"keep {layer.producer or layer.tensor} in float (exclude {', '.join(new)}){unnamed}")
        _try(search, c, echo)
        if c.within_budget:
            break
    return ranked


def _diagnose(candidates: list[Candidate], search: _Search, echo: Callable[[str], None]) -> list[dict[str, Any]]:
    """For int8 candidates timed no faster than their fp32 twin (ONNX Runtime, ExecuTorch): where the time goes."""
    from mobilize.tune.why import why_not_faster

    out = []
    for runtime, twin in (("onnxruntime", "onnx-fp32"), ("executorch", "executorch-fp32")):
        fp32 = next((c for c in candidates if c.name == twin and c.latency_ms_p50), None)
        slow = fp32 and next((c for c in candidates if c.runtime == runtime and c.kind == Kind.QUANTIZED
                              and c.latency_ms_p50 and c.latency_ms_p50 >= fp32.latency_ms_p50), None)
        if slow:  # one diagnosis per runtime: its int8 candidates share the cause
            d = why_not_faster(fp32.path, slow.path, search.samples[0])
            for line in d.lines():
                echo(line)
            out.append({"candidate": slow.name, **d.to_json()})
    return out


def _profiles(candidates: list[Candidate], search: _Search, echo: Callable[[str], None]) -> dict[str, Any]:
    """Time-weighted profiles (ETDump, ONNX Runtime's profiler) of the winner and every candidate within budget;
    a WARNING line when a few ops outside the delegate dominate one of them."""
    from mobilize.profile import profile_file

    out: dict[str, Any] = {}
    for c in candidates:
        if c.within_budget and c.path is not None and c.path.suffix in (".pte", ".bpte", ".onnx"):
            profile = profile_file(c.path, search.samples[0])
            out[c.name] = profile.to_json()
            warning = profile.warning()
            if warning:
                echo(f"{c.name}: {warning}")
    return out