"""``tune`` for a causal LM: the fastest decoder file whose perplexity stays within the budget.

Every engine's decoder variant is a candidate.  An int4 variant whose tool offers group sizes (weights per scale)
climbs a ladder, coarsest group first - the fewest scale bytes read per decoded token - and stops at the first
group whose file is within ``--max-ppl-increase``: a finer group costs bytes and is only worth them when the
coarser one broke the model.  The files within the budget are then timed in the compare's raced rounds (decode
time per token, the same ids in every runtime) and the race's leader wins; its name (``onnx-int4@g64``) is the
recipe ``mobilize optimize MODEL --recipe NAME`` rebuilds it with.

Written by hand because no engine's tool searches across engines: each offers its own knobs (torchao's
``PerGroup``, ONNX Runtime's ``block_size``, NNCF's ``group_size``, litert-torch's block recipes), which this
module only orders and stops.

    >>> ladder_groups((128, 64, 32, 16), [256, 704])
    [64, 32, 16]
    >>> ladder_groups((128, 64, 32, 16), [256, 704], pads=True)
    [128, 64, 32, 16]
    >>> ladder_groups((), [256])
    []
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from mobilize.core.outcome import Outcome
from mobilize.generation.config import GenerationConfig

Progress = Callable[[int, int, str], None]


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


def tune_generation(cfg: GenerationConfig, ref: Any, engines: Sequence[str] = (), search_budget_s: float | None = None,
                    progress: Progress | None = None, on_update: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Climb each variant's ladder, race the files within the budget, pick the leader; returns the report
    (compare's generation report with a ``tune`` block: every file tried, why each ladder stopped, the winner).

    Long because the ladder's stop rule, the time budget and the report's account of both are one loop."""
    from mobilize.core.checks import default_threads
    from mobilize.core.paths import check_output_dir
    from mobilize.generation.model import prepare
    from mobilize.generation.plan import generation_variants
    from mobilize.generation.run import DecoderResult, build_and_check, recommend, report_of, time_files

    say = progress or (lambda done, total, text: None)
    out = check_output_dir(cfg.out_dir)
    threads = cfg.threads or default_threads()
    variants = [v for v in generation_variants(cfg.variants) if not engines or v.engine in engines]
    say(0, 0, "the float model and the held-out text")
    t0 = time.monotonic()
    model = prepare(ref, out / "work", cfg)
    in_features = linear_in_features(model.folder)
    results: dict[str, DecoderResult] = {}
    state = {"model": model, "results": results, "cfg": cfg, "threads": threads, "timing": None, "recommended": None}
    steps: list[dict[str, Any]] = []
    cut_short: list[str] = []

    def update() -> dict[str, Any]:
        report = {**report_of(state), "plan": "tune", "tune": _tune_block(steps, cut_short, state, search_budget_s)}
        if on_update:
            on_update(report)
        return report

    for v in variants:
        rungs = ladder(v, in_features)
        for i, rung in enumerate(rungs):
            if search_budget_s is not None and time.monotonic() - t0 > search_budget_s:
                cut_short.append(f"{rung.name} and the rest of {v.name}'s ladder not tried: the time budget "
                                 f"({search_budget_s:g} s) ran out")
                break
            say(0, 0, f"{rung.name}: build and judge")
            r = DecoderResult(rung.name, rung.engine, rung.weights, str(rung.promise), rung.how)
            results[rung.name] = r
            build_and_check(rung, r, model, cfg, threads, out)
            step = {"variant": v.name, "name": rung.name, "group": rung.group, "outcome": str(r.outcome),
                    "ppl_increase_percent": ((r.verdict or {}).get("numbers") or {}).get("ppl_increase_percent")}
            steps.append(step)
            if r.outcome in (Outcome.OK, Outcome.VACUOUS) or i == len(rungs) - 1:
                step["stop"] = ("within the budget" if r.outcome == Outcome.OK else "a near-uniform reference: no "
                                "group can be judged" if r.outcome == Outcome.VACUOUS else "the finest group it offers")
                break
            step["stop"] = f"{r.outcome}: next, group {rungs[i + 1].group}"
        update()
    if cfg.timed:
        say(0, 0, "timed rounds of the files within the budget (prefill, then decode with the cache)")
        time_files(state, out, timed_outcomes=(Outcome.OK,))  # files over the budget cannot win
        recommend(state)
    return update()


def _tune_block(steps: list[dict[str, Any]], cut_short: list[str], state: dict[str, Any],
                search_budget_s: float | None) -> dict[str, Any]:
    rec = state["recommended"]
    winner = state["results"].get(rec["name"]) if rec else None
    return {"rule": "the coarsest int4 group within --max-ppl-increase per variant, then the race's leader on decode "
                    "time per token among the files within the budget",
            "search_budget_s": search_budget_s, "steps": steps, "cut_short": cut_short,
            "winner": rec["name"] if rec else None, "winner_path": winner.path if winner else None}
