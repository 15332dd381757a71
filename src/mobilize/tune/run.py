"""``tune()``: the search from its starting recipes to the written winner, its recipe and the report.

Every searched runtime's route gives its starting recipes (:mod:`mobilize.tune.candidates`); each is built and
judged (:mod:`mobilize.tune.search`); int8 candidates over budget keep their worst layers in float
(:mod:`mobilize.tune.exclude`); where mobilize departs from a stock default it measures the default beside it
(:mod:`mobilize.tune.stock`); the candidates within budget are timed and the fastest wins
(:mod:`mobilize.tune.timing`); slow int8 files are explained and the ones within budget profiled
(:mod:`mobilize.tune.explain`).  Ctrl-C (or the time budget) stops the search and keeps the best found so far.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from mobilize.core.jsonfile import dumps_measured
from mobilize.accuracy.verify import DEFAULT_POLICY, Policy
from mobilize.tune.candidates import Candidate
from mobilize.tune.exclude import MAX_EXCLUSIONS
from mobilize.tune.prune import FINETUNE_MAX_STEPS
from mobilize.tune.result import TuneResult
from mobilize.tune.search import Search

EVAL_SAMPLES = 200
"""Labelled samples every candidate is judged on (the same for all, so differences are paired)."""
ROUNDS = 7
ITERATIONS = 20
MIN_ROUNDS = 3
"""The rounds the candidates are timed in when the time budget is nearly spent (an interval needs a few)."""


class _Clock:
    """The time budget: whether the next step would overrun, and what it cut."""

    def __init__(self, budget_s: float | None, start: float, search: Search, echo: Callable[[str], None]):
        self.budget_s, self.start, self.search, self.echo = budget_s, start, search, echo
        self.cut: list[str] = []
        self.steps: list[tuple[str, float]] = [("building and running the float model", start)]
        """Each step's name and when it started, to name the one a budget ran out in."""

    def enter(self, step: str) -> None:
        self.steps.append((step, time.perf_counter()))

    def overrun(self) -> str | None:
        """One line when the run took longer than the budget: by how much, and the step it ran out in (a step
        runs to its end once started; the budget is checked between steps)."""
        if self.budget_s is None:
            return None
        elapsed = time.perf_counter() - self.start
        if elapsed <= self.budget_s:
            return None
        end = self.start + self.budget_s
        during = next(name for name, t in reversed(self.steps) if t <= end)
        return (f"time budget: {self.budget_s:g} s, the run took {elapsed:.0f} s ({elapsed - self.budget_s:.0f} s "
                f"over): it ran out during {during}, which runs to its end once started (the budget is checked "
                f"between steps: a step starts while more time is left than the longest candidate took)")

    def __call__(self, what: str = "the exclusion search stopped") -> bool:
        """Whether the next step would overrun: less time is left than the longest candidate took so far (a budget
        is kept to within one candidate's duration).  Says what it cut, once per cut."""
        if self.budget_s is None:
            return False
        left = self.budget_s - (time.perf_counter() - self.start)
        if left > self.search.longest_s:
            return False
        line = (f"time budget: {max(left, 0):.0f} s left of {self.budget_s:g} s, less than the longest candidate "
                f"so far ({self.search.longest_s:.0f} s): {what}")
        if line not in self.cut:
            self.cut.append(line)
            self.echo(line)
        return True


def tune(module: Any, input_specs: Sequence[Any], *, data: str, calibration: str | None = None,
         policy: Policy = DEFAULT_POLICY, runtimes: Sequence[str] | None = None, out_dir: Any = "out",
         stem: str = "model", time_budget_s: float | None = None, eval_samples: int = EVAL_SAMPLES,
         calibration_samples: int = 100, max_exclusions: int = MAX_EXCLUSIONS, rounds: int = ROUNDS,
         iterations: int = ITERATIONS, echo: Callable[[str], None] = lambda _text: None, target: str = "host",
         prune: Sequence[float] = (), prune_finetune_steps: int = FINETUNE_MAX_STEPS, thread_search: bool = True, task: str | None = None,
         metric: str | None = None) -> TuneResult:
    """Search recipes for the fastest artifact within ``policy``'s budget; write it, its recipe and a report.

    ``runtimes``: the engines' runtimes searched (None: the routes that are searched by default).
    ``data`` gives the (labelled, if possible) samples every candidate is judged on; ``calibration``
    the samples int8 ranges are calibrated on (default: ``data``), and the labelled samples a pruned
    candidate's distilled fine-tune trains on.  ``prune``: fractions of the MACs structured pruning removes, one
    level each (:mod:`mobilize.tune.prune`; ``prune_finetune_steps`` caps each level's fine-tune, 0: no cap).
    ``target`` decides CPU-dependent choices (``--target``).  ``thread_search``: time the winner at 1..cores
    threads and state the best count.  ``task``/``metric``: the measure the budget is judged on
    (:mod:`mobilize.accuracy.tasks`; None: guessed from the float model's outputs)."""
    from mobilize.core.noise import into_log
    from mobilize.tune.routes import default_runtimes

    runtimes = default_runtimes() if runtimes is None else runtimes
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "logs" / "tune.log"
    size = log.stat().st_size if log.is_file() else 0
    with into_log(log) as logged:  # numpy's and the runtimes' warnings: into the log, off the terminal
        result = _tune(module, input_specs, out, data=data, calibration=calibration, policy=policy, runtimes=runtimes,
                       stem=stem, time_budget_s=time_budget_s, eval_samples=eval_samples,
                       calibration_samples=calibration_samples, max_exclusions=max_exclusions, rounds=rounds,
                       iterations=iterations, echo=echo, target=target, prune=prune,
                       prune_finetune_steps=prune_finetune_steps, thread_search=thread_search, task=task,
                       metric=metric)
    if logged is not None and log.is_file() and log.stat().st_size > size:
        lines = log.read_text(errors="replace")[size:].count("\n")
        echo(f"the libraries' own warnings and log lines ({lines}) are in {log}, not shown here")
    return result


def _tune(module: Any, input_specs: Sequence[Any], out: Path, *, data: str, calibration: str | None,
          policy: Policy, runtimes: Sequence[str], stem: str, time_budget_s: float | None, eval_samples: int,
          calibration_samples: int, max_exclusions: int, rounds: int, iterations: int, echo: Callable[[str], None],
          target: str, prune: Sequence[float], prune_finetune_steps: int, thread_search: bool, task: str | None,
          metric: str | None) -> TuneResult:
    """:func:`tune`'s search, its stderr already in the log."""
    start = time.perf_counter()
    search = Search(module, list(input_specs), data, calibration, out, stem, policy, echo, eval_samples, task, metric,
                    target)
    echo(search.task.describe())
    candidates: list[Candidate] = []
    layers: dict[str, list[Any]] = {}
    choices: list[dict[str, Any]] = []
    interrupted = False
    if search.reference_warning:
        echo(search.reference_warning)
    out_of_time = _Clock(time_budget_s, start, search, echo)
    try:
        choices = _search(search, candidates, layers, runtimes, calibration_samples, prune, prune_finetune_steps,
                          max_exclusions, out_of_time, echo)
    except KeyboardInterrupt:
        interrupted = True
        echo("interrupted: keeping the best candidate found so far")
    return _finish(search, candidates, layers, choices, interrupted, start, runtimes, rounds, iterations,
                   thread_search, out_of_time, echo)


def _search(search: Search, candidates: list[Candidate], layers: dict[str, list[Any]], runtimes: Sequence[str],
            calibration_samples: int, prune: Sequence[float], prune_finetune_steps: int, max_exclusions: int,
            out_of_time: _Clock, echo: Callable[[str], None]) -> list[dict[str, Any]]:
    """Build and judge every starting candidate, exclude layers where int8 missed the budget, measure the stock
    defaults; ``candidates`` and ``layers`` grow as it goes (Ctrl-C keeps what was found).  Returns the choices."""
    from mobilize.tune.candidates import candidate_recipes
    from mobilize.tune.exclude import exclude_over_budget
    from mobilize.tune.prune import prune_recipes
    from mobilize.tune.search import try_candidate

    recipes = candidate_recipes(runtimes, calibration_samples)
    recipes += prune_recipes(prune, recipes, prune_finetune_steps) if prune else []
    for name, recipe, runtime in recipes:
        if out_of_time(f"{name} and later candidates not tried"):
            break
        c = Candidate(name, recipe, runtime)
        candidates.append(c)
        out_of_time.enter(f"building and judging {name}")
        try_candidate(search, c, echo)
    out_of_time.enter("the search for layers to keep in float")
    exclude_over_budget(search, candidates, runtimes, max_exclusions, out_of_time, echo, layers)
    if out_of_time("ONNX Runtime's stock default not measured beside mobilize's choice"):
        return []
    out_of_time.enter("measuring ONNX Runtime's stock default")
    from mobilize.tune.stock import stock_reduce_range

    return stock_reduce_range(search, candidates, echo)


def _finish(search: Search, candidates: list[Candidate], layers: dict[str, list[Any]], choices: list[dict[str, Any]],
            interrupted: bool, start: float, runtimes: Sequence[str], rounds: int, iterations: int,
            thread_search: bool, out_of_time: _Clock, echo: Callable[[str], None]) -> TuneResult:
    """Time the candidates within budget and choose the winner, search its thread count, explain slow int8 files,
    profile the ones within budget; write the winner, its recipe and the report."""
    from mobilize.pipeline.recipe import dump_recipe
    from mobilize.report.tune_html import write_tune_html
    from mobilize.tune.explain import diagnose, profiles
    from mobilize.tune.timing import best_threads, choose

    out, stem = search.out_dir, search.stem
    fewer = min(rounds, MIN_ROUNDS)
    if not interrupted and fewer < rounds and out_of_time(f"the candidates timed in {fewer} rounds, not {rounds}"):
        rounds = fewer
    out_of_time.enter("timing the candidates")
    winner, tie_with = choose(candidates, search.samples[0], rounds, iterations, interrupted, echo)
    result = TuneResult(candidates, winner, search.reference_top1, tie_with, layers, interrupted,
                        time.perf_counter() - start, cut_short=out_of_time.cut, choices=choices,
                        task=search.task.to_json())
    if winner is not None and thread_search and not interrupted and not out_of_time("no thread-count search"):
        from mobilize.core.target import host_cpu

        out_of_time.enter("the thread-count search")
        result.threads = best_threads(winner.path, search.samples[0], host_cpu().cores, rounds, iterations)
        echo(result.threads["line"])
    if not interrupted and not out_of_time("no diagnosis of slow int8 candidates, no time profiles"):
        out_of_time.enter("the diagnosis of slow int8 candidates")
        result.diagnoses = diagnose(candidates, search, runtimes, echo)
    if winner is not None:
        artifact = out / f"{stem}-tune{winner.path.suffix}"
        shutil.copyfile(winner.path, artifact)
        recipe = out / f"{stem}-tune.yaml"
        dump_recipe(winner.built_recipe or winner.recipe, recipe)  # what the target decided written in
        result.files += [artifact, recipe]
    if not interrupted and not out_of_time("no time profiles"):
        out_of_time.enter("the time profiles")
        result.profiles = profiles(candidates, search, echo)
    over = out_of_time.overrun()
    if over:
        result.cut_short.append(over)
        echo(over)
    report = out / "tune-report.json"
    html = out / "tune-report.html"
    result.files += [report, html]
    report.write_text(dumps_measured({**result.to_json(), "policy": search.policy.to_json(search.task.task),
                                  "reference_warning": search.reference_warning}, indent=2, default=str) + "\n")
    write_tune_html(report)
    return result

