"""``compare`` for a causal LM: every engine's decoder file built in its own process, judged token by token
against the float model, then timed together in raced rounds (prefill and decode), with the bandwidth bound.

    >>> from mobilize.generation.config import GenerationConfig
    >>> GenerationConfig().prompt_tokens, GenerationConfig().gen_tokens
    (32, 32)
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mobilize.core.errors import InternalError, MobilizeError
from mobilize.core.outcome import Outcome
from mobilize.generation.config import GenerationConfig
from mobilize.generation.plan import REFERENCE, generation_variants

Progress = Callable[[int, int, str], None]


@dataclasses.dataclass
class DecoderResult:
    name: str
    engine: str
    weights: str
    promise: str
    how: str
    outcome: Outcome = Outcome.PENDING
    path: str | None = None
    size_bytes: int | None = None
    build_s: float | None = None
    peak_rss_mb: float | None = None
    """Peak resident memory of the process that loaded this file and ran its checks (its runtime, torch and the
    held-out logits included): each file in a process of its own."""
    verdict: dict[str, Any] | None = None
    timing: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)

    def fail(self, outcome: Outcome, stage: str, exc: BaseException) -> None:
        self.outcome = outcome
        bug = " (a bug in mobilize: please report it)" if isinstance(exc, InternalError) else ""
        self.notes.append(f"{stage}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}{bug}")

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "outcome": str(self.outcome)}


def unavailable(variant: Any) -> str | None:
    """Why a variant cannot run here (a package missing, or the engine's own reason), else None."""
    import importlib.util

    missing = [p for p in variant.packages if importlib.util.find_spec(p) is None]
    if missing:
        return f"needs {', '.join(missing)} (pip install {' '.join(missing)})"
    return variant.available()


def logits_sqnr_db(reference: np.ndarray, candidate: np.ndarray) -> float:
    """SQNR of a file's logits against the float model's, in float64 (one figure over every position)."""
    ref, got = reference.astype(np.float64), candidate.astype(np.float64)
    if got.shape != ref.shape:
        return float("-inf")
    noise, signal = float(((got - ref) ** 2).sum()), float((ref ** 2).sum())
    return math.inf if noise == 0 else 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def compare_generation(cfg: GenerationConfig, ref: Any, progress: Progress | None = None,
                       on_update: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Build, check, time and judge every decoder variant; returns the report (also given to ``on_update`` after
    every step)."""
    from mobilize.core.checks import default_threads
    from mobilize.core.paths import check_output_dir
    from mobilize.generation.model import prepare

    say = progress or (lambda done, total, text: None)
    out = check_output_dir(cfg.out_dir)
    threads = cfg.threads or default_threads()
    variants = generation_variants(cfg.variants)
    results = {v.name: DecoderResult(v.name, v.engine, v.weights, str(v.promise), v.how) for v in variants}
    steps, done = 2 * len(variants) + 2, 0
    say(done, steps, "the float model and the held-out text")
    model = prepare(ref, out / "work", cfg)
    done += 1
    state = {"model": model, "results": results, "cfg": cfg, "threads": threads, "timing": None, "recommended": None}

    def update() -> dict[str, Any]:
        report = report_of(state)
        if on_update:
            on_update(report)
        return report

    for v in variants:
        say(done, steps, f"{v.name}: build")
        build_and_check(v, results[v.name], model, cfg, threads, out)
        done += 2
        update()
    if cfg.timed:
        say(done, steps, "timed rounds (prefill, then decode with the cache)")
        time_files(state, out)
        recommend(state)
    say(steps, steps, "done")
    return update()


def build_and_check(v: Any, r: DecoderResult, model: Any, cfg: GenerationConfig, threads: int, out: Path) -> None:
    from mobilize.accuracy.decoder_verdict import assess_decoder, continuation_match
    from mobilize.accuracy.generation import measure_tokens
    from mobilize.generation.checks import build_variant, check_variant
    from mobilize.pipeline.isolate import run_isolated

    why = unavailable(v)
    if why:
        r.outcome = Outcome.UNAVAILABLE
        r.notes.append(f"not run: {why}")
        return
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        built = run_isolated(build_variant, v.name, str(model.folder), str(out / "artifacts" / v.name),
                             what=f"{v.name} build", timeout_s=cfg.timeout_s, log_path=logs / f"{v.name}-build.log",
                             capture_stderr=True)
    except MobilizeError as exc:
        return r.fail(Outcome.EXPORT_FAIL, "build", exc)
    r.path, r.size_bytes, r.build_s = built["path"], built["size_bytes"], built["build_s"]
    logits_path = out / "work" / f"{v.name}-logits.npy"
    try:
        checked = run_isolated(check_variant, v.name, r.path, threads, cfg.max_len, model.eval_ids,
                               model.continuation_prompts, cfg.gen_tokens, str(logits_path), what=f"{v.name} check",
                               timeout_s=cfg.timeout_s, log_path=logs / f"{v.name}-check.log", capture_stderr=True)
    except MobilizeError as exc:
        return r.fail(Outcome.RUN_FAIL, "load and check", exc)
    r.notes += checked.get("notes", [])
    r.peak_rss_mb = checked.get("peak_rss_mb")
    logits = np.load(logits_path)
    tokens = measure_tokens(model.reference_logits, logits, model.eval_ids, cfg.policy)
    matches = continuation_match(model.reference_continuations, checked["continuations"])
    verdict = assess_decoder(r.promise, logits_sqnr_db(model.reference_logits, logits), checked["cache"], tokens,
                             matches, cfg.policy)
    r.outcome, r.verdict = verdict.outcome, verdict.to_json()
    logits_path.unlink(missing_ok=True)


def time_files(state: dict[str, Any], out: Path, timed_outcomes: tuple[Outcome, ...] = (
        Outcome.OK, Outcome.OVER_BUDGET, Outcome.VACUOUS)) -> None:
    """The timed rounds of every built file whose outcome is in ``timed_outcomes``, raced among the OK ones."""
    from mobilize.generation.timing import time_decoders
    from mobilize.pipeline.isolate import run_isolated

    cfg, model, results = state["cfg"], state["model"], state["results"]
    timed = [(n, r.path) for n, r in results.items() if r.path and r.outcome in timed_outcomes]
    if not timed:
        return
    candidates = [n for n, _ in timed if results[n].outcome == Outcome.OK]
    try:
        state["timing"] = run_isolated(time_decoders, timed, candidates, state["threads"], cfg.max_len, model.prompt,
                                       model.decode_ids, cfg.rounds, cfg.time_budget_s, what="timed rounds",
                                       timeout_s=cfg.timeout_s, log_path=out / "logs" / "timing.log",
                                       capture_stderr=True)
    except MobilizeError as exc:
        for name, _ in timed:
            results[name].notes.append(f"timed rounds: {exc}")
        return
    for name, reason in state["timing"]["failed"].items():
        results[name].fail(Outcome.LOAD_FAIL, "timing load", MobilizeError(reason))
    for name, rounds in state["timing"]["timed"].items():
        results[name].timing = _figures(rounds, results[name].size_bytes, state["timing"]["bandwidth"]["gb_per_s"])
    _speedups(results)


def _figures(rounds: dict[str, Any], size_bytes: int | None, gb_per_s: float) -> dict[str, Any]:
    import statistics

    from mobilize.bench.bandwidth import decode_bound

    decode = rounds["decode"]
    per_token = decode.get("latency_ms_p50")
    tok_s = 1000.0 / per_token if per_token else None
    bound = decode_bound(gb_per_s, size_bytes) if size_bytes else None
    return {"prefill_ms_p50": statistics.median(rounds["prefill_ms"]) if rounds["prefill_ms"] else None,
            "decode_ms_per_token_p50": per_token, "decode_ms_per_token_p90": decode.get("latency_ms_p90"),
            "decode_tokens_per_s": tok_s, "bound_tokens_per_s": bound,
            "percent_of_bound": 100.0 * tok_s / bound if tok_s and bound else None,
            "decode_round_medians_ms": rounds["decode_round_medians_ms"], "prefill_ms_rounds": rounds["prefill_ms"]}


def _speedups(results: dict[str, DecoderResult]) -> None:
    from mobilize.accuracy.stats import ratio_ci

    base = results.get(REFERENCE)
    medians = base.timing.get("decode_round_medians_ms") if base else None
    for r in results.values():
        if medians and r.timing.get("decode_round_medians_ms"):
            ci = ratio_ci(medians, r.timing["decode_round_medians_ms"])
            r.timing["decode_speedup"] = {**ci.to_json(), "reference": REFERENCE}


def recommend(state: dict[str, Any]) -> None:
    from mobilize.generation.recommend import recommend_decoder

    state["recommended"] = recommend_decoder(state["results"], state["timing"])


def report_of(state: dict[str, Any]) -> dict[str, Any]:
    """The report as report.json holds it (schema_version, task ``generation``)."""
    import mobilize
    from mobilize.core.target import host_cpu
    from mobilize.report.json_report import SCHEMA_VERSION

    cfg, model, timing = state["cfg"], state["model"], state["timing"] or {}
    return {
        "schema_version": SCHEMA_VERSION, "mobilize_version": mobilize.__version__, "task": "generation",
        "created": datetime.datetime.now().isoformat(timespec="seconds"), "model": cfg.model, "plan": "generation",
        "threads": state["threads"], "host_cpu": host_cpu().to_json(),
        "settings": {"prompt_tokens": cfg.prompt_tokens, "gen_tokens": cfg.gen_tokens,
                     "eval_sequences": cfg.eval_sequences, "eval_tokens": cfg.eval_tokens,
                     "continuations": cfg.continuations, "rounds": cfg.rounds, "time_budget_s": cfg.time_budget_s,
                     "max_len": cfg.max_len},
        "policy": {"max_ppl_increase_percent": cfg.policy.max_ppl_increase_percent},
        "held_out": model.text_source, "parameters": model.parameters, "vocab_size": model.vocab_size,
        "reference_variant": REFERENCE, "bandwidth": timing.get("bandwidth"), "racing": timing.get("racing"),
        "machine_load": timing.get("machine_load"), "recommended": state["recommended"],
        "notes": list(model.notes), "variants": [r.to_json() for r in state["results"].values()],
    }
