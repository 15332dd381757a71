"""Typed results of a compare run: one VariantResult per variant, written as report.json.

    >>> r = VariantResult("fused")
    >>> r.outcome, r.to_json()["outcome"]
    (<Outcome.PENDING: 'PENDING'>, 'PENDING')
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

from mobilize.core.outcome import Outcome


VARIANT_JSON_SKIPS = ("latency", "details", "fidelity")
"""Fields ``to_json`` does not write as themselves: latency and details are merged in flat, fidelity sits in the
verdict."""


@dataclasses.dataclass
class TokenFigures:
    """A decoder file's figures in tokens (the ``generation`` task): what it is, how fast it answers and how close
    to the float model it stays.  Times come from compare's timed rounds (each a prefill of the prompt, then the
    decode steps on the KV cache); quality from the check (teacher-forced on held-out text)."""

    engine: str
    weights: str
    """``fp32``, ``int8`` or ``int4``: what the weights are stored as."""
    how: str
    """The tool and scheme that built it (``torchao 8da4w, group 32, XNNPACK, static KV cache``)."""
    group: int | None = None
    """The int4 group it was built with (``NAME@gN``; None: the engine's stock setting)."""
    ttft_ms_p50: float | None = None
    """Time to the first token: the prefill of the prompt, median over the timed rounds."""
    ttft_ms_rounds: list[float] = dataclasses.field(default_factory=list)
    decode_ms_per_token_p50: float | None = None
    decode_ms_per_token_p90: float | None = None
    decode_tokens_per_s: float | None = None
    """1000 / decode_ms_per_token_p50."""
    bytes_per_token: int | None = None
    """What decoding one token reads of the file's weights (embeddings one row, a tied table once): from the file's
    own tensor sizes where its engine reads them (GGUF), else from the model's shapes and the file's weight type
    (:func:`mobilize.bench.bandwidth.bytes_per_token`)."""
    cache_resident: bool | None = None
    """The bytes read per token are served from a cache, as measured (``cache_rule``): no DRAM bound
    (``bound_tokens_per_s`` is then None)."""
    cache_rule: str | None = None
    """How ``cache_resident`` was decided: the read over a buffer of the working set against the DRAM figure
    (:func:`mobilize.bench.bandwidth.residency`), never the cache size the machine reports."""
    bound_tokens_per_s: float | None = None
    """The memory-bandwidth bound: the bandwidth measured on the decode's threads over ``bytes_per_token``
    (:mod:`mobilize.bench.bandwidth`)."""
    percent_of_bound: float | None = None
    ppl_reference: float | None = None
    ppl_candidate: float | None = None
    ppl_increase_percent: float | None = None
    ppl_increase_percent_low: float | None = None
    ppl_increase_percent_high: float | None = None
    """The paired-bootstrap 95% interval of the perplexity increase, over held-out sequences."""
    top1_agreement: float | None = None
    """Share of held-out positions whose most likely next token is the float model's (0-1)."""
    continuation_match_tokens: list[int] = dataclasses.field(default_factory=list)
    """Per prompt: greedy tokens equal to the float model's before the first difference."""
    continuation_tokens: int | None = None
    cache_sqnr_db: float | None = None
    """The file's decode steps against its own prefill of the same positions."""
    logits_sqnr_db: float | None = None
    """Teacher-forced logits against the float model's."""
    check_peak_rss_mb: float | None = None
    """Peak memory of the process that loaded this file alone and ran its checks (torch and the float model's
    answers in it too: not what an app holds; ``footprint_mb`` is)."""
    footprint_mb: float | None = None
    """The file's memory beyond its runtime: the peak resident memory of a fresh process that imports only the
    runtime, loads the file, runs the prompt and a few decode steps, less ``baseline_mb``
    (:mod:`mobilize.generation.footprint`)."""
    baseline_mb: float | None = None
    """That process's resident memory with the runtime imported and nothing loaded (the runtime's bare cost)."""
    footprint_peak_mb: float | None = None
    """That process's peak resident memory (runtime and file together: what an app with this file holds)."""

    def timed(self, ttft_ms: list[float], p50_ms: float | None, p90_ms: float | None,
              bandwidth: dict[str, Any], shapes: dict[str, int] | None) -> "TokenFigures":
        """These figures with the timed rounds' (and the bandwidth bound's) filled in: ``bandwidth`` as the run
        measured it (``gb_per_s``, ``last_level_cache_bytes``), ``shapes`` the model's (what a token reads)."""
        from mobilize.bench.bandwidth import decode_bound, residency

        rate = 1000.0 / p50_ms if p50_ms else None
        read = self.working_set(shapes)
        gb_per_s, at_size = bandwidth.get("gb_per_s"), bandwidth.get("at_size_gb_per_s") or {}
        paired = (bandwidth.get("at_size_dram_gb_per_s") or {}).get(str(read))
        resident, rule = residency(read, at_size.get(str(read)), paired or gb_per_s,
                                   " (the whole buffer read right after it)" if paired else "") \
            if str(read) in at_size else \
            (None, "not measured: no read at its working set's size in this run (its bound is the DRAM one)")
        bound = decode_bound(gb_per_s, read) if gb_per_s and read and not resident else None
        return dataclasses.replace(self, ttft_ms_rounds=list(ttft_ms), bytes_per_token=read, cache_resident=resident,
                                   cache_rule=rule if read else None,
                                   ttft_ms_p50=statistics.median(ttft_ms) if ttft_ms else None,
                                   decode_ms_per_token_p50=p50_ms, decode_ms_per_token_p90=p90_ms,
                                   decode_tokens_per_s=rate, bound_tokens_per_s=bound,
                                   percent_of_bound=100.0 * rate / bound if rate and bound else None)

    def working_set(self, shapes: dict[str, int] | None) -> int | None:
        """What one decoded token reads of this file's weights: its own figure (a GGUF's tensors) or the model's
        shapes at its weight type."""
        from mobilize.bench.bandwidth import bytes_per_token

        return self.bytes_per_token or (bytes_per_token(shapes, self.weights, self.group) if shapes else None)

    @classmethod
    def checked(cls, details: dict[str, Any], c: Any) -> "TokenFigures":
        """From what the build recorded (``details``) and the check's comparison (a ``TokenComparison``)."""
        t = c.tokens
        footprint = details.get("footprint") or {}
        return cls(footprint_mb=footprint.get("footprint_mb"), baseline_mb=footprint.get("baseline_mb"),
                   footprint_peak_mb=footprint.get("peak_mb"), engine=details.get("engine", ""), weights=details.get("weights", ""), how=details.get("how", ""),
                   group=details.get("group"), ppl_reference=t.reference_ppl, ppl_candidate=t.candidate_ppl,
                   ppl_increase_percent=t.ppl_increase_percent, ppl_increase_percent_low=t.ppl_increase_percent_low,
                   ppl_increase_percent_high=t.ppl_increase_percent_high, top1_agreement=t.top1_agreement,
                   continuation_match_tokens=list(c.continuation_match_tokens),
                   continuation_tokens=c.continuation_tokens, cache_sqnr_db=c.cache.get("sqnr_db"),
                   logits_sqnr_db=c.logits_sqnr_db, check_peak_rss_mb=details.get("check_peak_rss_mb"),
                   bytes_per_token=details.get("bytes_per_token"))


@dataclasses.dataclass
class VariantResult:
    name: str
    outcome: Outcome = Outcome.PENDING
    stage: str | None = None
    """The stage a failure happened in (None when it did not fail)."""
    notes: list[str] = dataclasses.field(default_factory=list)
    artifact: str | None = None
    format: str | None = None
    runtime: str | None = None
    kind: str | None = None
    """float | reduced | quantized | changed: what the variant promises against the float model (accuracy.verify.Kind)."""
    size_bytes: int | None = None
    load_ms: float | None = None
    first_run_ms: float | None = None
    accuracy: dict[str, Any] | None = None
    """The comparison with the float model (float64, scale-normalised) plus top-1, drop and its interval."""
    verdict: dict[str, Any] | None = None
    """The verify core's verdict: outcome, rule, reason, numbers."""
    latency: dict[str, Any] = dataclasses.field(default_factory=dict)
    """BenchStats fields (latency_ms_p50, ...) once timed."""
    latency_ms_round_medians: list[float] = dataclasses.field(default_factory=list)
    round_spread_percent: float | None = None
    speedup: dict[str, Any] | None = None
    """Against the reference variant: ratio with its 95% interval from paired rounds, and ``significant``."""
    frames: dict[str, Any] | None = None
    """``compare --frames``: camera frame to answer (:mod:`mobilize.camera.figures`): its statistics, round medians
    and speed-up (the race and the pick are made on them), each stage's p50 and share, and the infer check."""
    peak_rss_mb: float | None = None
    """Peak resident memory of the process that timed it (the shared timing host's when ``details.timing_worker``
    is ``host``: shared with the other hosted variants; report.json's ``timing_memory`` counts it once)."""
    on_device_only: bool = False
    """The runtime checks numbers on this host but cannot time the real thing (e.g. NNAPI)."""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    fidelity: dict[str, Any] | None = None
    """The file vs the module it was exported from, as the build checked it (reported inside ``verdict``)."""
    tokens: TokenFigures | None = None
    """A decoder file's figures in tokens (the ``generation`` task; None for every other task)."""

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def fail(self, outcome: Outcome, stage: str, message: str) -> None:
        self.outcome, self.stage = outcome, stage
        self.note(f"{outcome} in {stage}: {message}")

    @property
    def latency_ms_p50(self) -> float | None:
        return self.latency.get("latency_ms_p50")

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in VARIANT_JSON_SKIPS}
        data["outcome"] = str(self.outcome)
        data["tokens"] = dataclasses.asdict(self.tokens) if self.tokens is not None else None
        data.update(self.latency)
        if self.speedup:
            data["speedup_vs_reference"] = self.speedup["ratio"]
        data.update({k: v for k, v in self.details.items() if k not in data})
        return _finite(data)


def _finite(value: Any) -> Any:
    """JSON has no inf or NaN: they become null (the accompanying fields say why)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
