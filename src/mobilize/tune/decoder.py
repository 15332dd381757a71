"""``tune`` for a causal LM: the fastest decoder file whose perplexity stays within the budget.

Every engine's decoder variant is a candidate.  An int4 variant whose tool offers group sizes (weights per scale)
climbs a ladder, coarsest group first - the fewest scale bytes read per decoded token - and stops at the first
group whose file is within ``--max-ppl-increase``: a finer group costs bytes and is only worth them when the
coarser one broke the model.  The files within the budget are then timed in compare's raced rounds (decode time
per token, the same ids in every runtime) and the race's leader wins; its name (``onnx-int4@g64``) is the recipe
``mobilize optimize MODEL --recipe NAME`` rebuilds it with.

The ladder is compare's one run (:class:`~mobilize.compare.plan_run.PlanRun`: the reference, each rung's build and
check in its own processes, its verdict from ``assess``, the timed rounds, the race and the pick) with its
variants' stage replaced by the climb: written by hand because no engine's tool searches across engines (each
offers its own knobs: torchao's ``PerGroup``, ONNX Runtime's ``block_size``, NNCF's ``group_size``, litert-torch's
block recipes), which this module only orders and stops.

    >>> ladder_groups((128, 64, 32, 16), [256, 704])
    [64, 32, 16]
    >>> ladder_groups((128, 64, 32, 16), [256, 704], pads=True)
    [128, 64, 32, 16]
    >>> ladder_groups((), [256])
    []
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from mobilize.core.outcome import Outcome

Progress = Callable[[int, int, str], None]
RULE = ("the coarsest int4 group within --max-ppl-increase per variant, then the race's leader on decode time per "
        "token among the files within the budget")


def ladder_groups(groups: Sequence[int], in_features: Sequence[int], pads: bool = False) -> list[int]:
    """The groups a variant offers that divide every linear's in-features (any, where its tool ``pads``), coarsest
    first."""
    return [g for g in sorted(groups, reverse=True) if pads or all(n % g == 0 for n in in_features)]


def linear_in_features(folder: Path) -> list[int]:
    """Every linear's in-features in a saved Llama-style decoder: the hidden size (attention, gate/up, lm_head) and
    the MLP's intermediate size (down)."""
    config = json.loads((Path(folder) / "config.json").read_text())
    return [int(config["hidden_size"]), int(config.get("intermediate_size") or config["hidden_size"])]


def ladder(variant: Any, in_features: Sequence[int]) -> list[Any]:
    """The files to try for one variant, in order: one per group that fits (coarsest first), else the variant as
    its engine builds it."""
    from mobilize.generation.plan import with_group

    return [with_group(variant, g) for g in ladder_groups(variant.groups, in_features, variant.groups_pad)] or [variant]


@dataclasses.dataclass
class Climb:
    """tune's variants stage: each variant's ladder, one rung at a time, and the account of it."""

    variants: list[Any]
    search_budget_s: float | None
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    cut_short: list[str] = dataclasses.field(default_factory=list)
    stopped: str | None = None
    """Why no ladder was climbed (a near-uniform reference), else None."""
    started: float = dataclasses.field(default_factory=lambda: time.monotonic())
    """When the command started: the budget counts the float reference's build too."""
    longest_s: float = 0.0
    """The longest rung so far: the next starts only while more time than this is left."""

    def overrun(self, report: dict[str, Any]) -> str | None:
        """One line when the run took longer than the budget: by how much and where the time went (a rung and the
        timed rounds run to their end once started)."""
        total = (report.get("stage_seconds") or {}).get("total")
        if self.search_budget_s is None or total is None or total <= self.search_budget_s:
            return None
        walls = (report.get("stage_seconds") or {}).get("wall") or {}
        parts = ", ".join(f"{name} {walls[key]:.0f} s" for key, name in (
            ("reference", "the float reference"), ("variants", "the ladders"), ("timed_rounds", "the timed rounds"))
            if walls.get(key) is not None)
        return (f"time budget: {self.search_budget_s:g} s, the run took {total:.0f} s "
                f"({total - self.search_budget_s:.0f} s over; {parts}): a rung starts while more time is left than "
                f"the longest rung took and runs to its end, and the timed rounds of the files found run after")

    def __call__(self, run: Any) -> None:
        from mobilize.compare.decoder_worker import MODEL_FOLDER

        if run.reference.warning:
            self.stopped = ("the float model predicts next to nothing (VACUOUS): no group can be judged against it, "
                            "so no file was built")
            return
        in_features = linear_in_features(run.workdir / MODEL_FOLDER)
        for v in self.variants:
            self._climb(run, ladder(v, in_features), self.started)
        for name in list(run.workers):  # files over the budget cannot win: they are not timed
            if run.results[name].outcome != Outcome.OK:
                run.workers.pop(name).stop()

    def _climb(self, run: Any, rungs: list[Any], t0: float) -> None:
        from mobilize.compare.variants import check_one
        from mobilize.generation.plan import DecoderStep
        from mobilize.report.results import VariantResult

        for i, rung in enumerate(rungs):
            left = None if self.search_budget_s is None else self.search_budget_s - (time.monotonic() - t0)
            if left is not None and left <= self.longest_s:
                self.cut_short.append(f"{rung.name} and the rest of its ladder not tried: {max(left, 0):.0f} s left "
                                      f"of the time budget ({self.search_budget_s:g} s), less than the longest "
                                      f"rung so far ({self.longest_s:.0f} s)")
                return
            step = DecoderStep(rung)
            run.variants.append(step)
            run.results[rung.name] = VariantResult(rung.name)
            began = time.monotonic()
            check_one(run, step)
            self.longest_s = max(self.longest_s, time.monotonic() - began)
            r = run.results[rung.name]
            done = r.outcome == Outcome.OK or i == len(rungs) - 1
            self.steps.append({"variant": rung.name.split("@")[0], "name": rung.name, "group": rung.group,
                               "outcome": str(r.outcome),
                               "ppl_increase_percent": r.tokens.ppl_increase_percent if r.tokens else None,
                               "stop": ("within the budget" if r.outcome == Outcome.OK else "the finest group it offers"
                                        if done else f"{r.outcome}: next, group {rungs[i + 1].group}")})
            if done:
                return

    def block(self, report: dict[str, Any]) -> dict[str, Any]:
        rec = report.get("recommended") or {}
        winner = next((v for v in report["variants"] if v["name"] == rec.get("name")), None)
        return {"rule": RULE, "search_budget_s": self.search_budget_s, "steps": self.steps,
                "cut_short": self.cut_short, "stopped": self.stopped, "winner": rec.get("name"),
                "winner_path": winner["artifact"] if winner else None}


def tune_generation(cfg: Any, ref: Any, engines: Sequence[str] = (), search_budget_s: float | None = None,
                    progress: Progress | None = None, on_update: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Climb each variant's ladder, race the files within the budget, pick the leader; returns the report
    (compare's report with a ``tune`` block: every file tried, why each ladder stopped, the winner)."""
    from mobilize.compare.config import CompareConfig
    from mobilize.compare.plan_run import PlanRun
    from mobilize.core.checks import default_threads
    from mobilize.core.paths import check_output_dir
    from mobilize.generation.plan import DecoderPlan, decoder_plan

    plan, notes = decoder_plan()
    variants = [s.variant for s in plan.variants if not engines or s.variant.engine in engines]
    out = check_output_dir(cfg.out_dir)
    decoding = cfg.decoding("a causal LM")
    cfg: CompareConfig = dataclasses.replace(cfg, out_dir=str(out), threads=cfg.threads or default_threads(),
                                             unit="token", task="generation", iterations=cfg.gen_tokens * cfg.rounds)
    climb = Climb(variants, search_budget_s)

    def update(report: dict[str, Any]) -> None:
        report.update(plan="tune", notes=notes, tune=climb.block(report))
        if on_update:
            on_update(report)

    run = PlanRun(cfg, DecoderPlan("tune", (), plan.reference), progress, update, ref, decoding)
    report = run.run(variants_stage=climb)
    over = climb.overrun(report)
    if over:
        climb.cut_short.append(over)
    update(report)
    return report
