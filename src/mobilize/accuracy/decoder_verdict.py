"""A decoder file's two verdict halves, from the one Policy; :func:`mobilize.accuracy.verify.assess` joins them
(with :func:`~mobilize.accuracy.verify.against_both`, the one verdict assembly), as it does for every task.

- **fidelity** (:func:`judge_decoder_fidelity`): a float file's teacher-forced logits against the float model's
  (``float-sqnr``: the exporter's promise, rounding only); every file's cache against its own prefill
  (``cache-consistency``: the same positions decoded one token at a time; a float file to the float floor, a
  quantized one to the reduced floor, lowered for a file whose own rounding takes it further from the float model,
  never under 20 dB: see :func:`cache_floor`).
- **quality** (:func:`judge_tokens`): OVER_BUDGET when the perplexity on held-out text rises more than the budget
  (``budget-ppl-increase``, the point estimate; its paired-bootstrap interval over sequences is reported).  A
  near-uniform float reference is the reference's warning (rule ``vacuous-reference``), found once by the
  reference stage (:func:`mobilize.accuracy.generation.near_uniform`), and makes an OK file VACUOUS.
- **the float sibling** (:func:`judge_siblings`): a quantized file whose tool's own float file (the variant's
  ``float_sibling``, in the same run) is MISMATCH against the float model carries that export error
  (``float-sibling``): its perplexity or agreement is then not quantization's alone to judge, and it is not OK.

    >>> from mobilize.accuracy.generation import measure_tokens
    >>> from mobilize.accuracy.verify import assess
    >>> import numpy as np
    >>> ids = np.random.default_rng(0).integers(0, 8, size=(4, 6))
    >>> logits = 4.0 * np.eye(8)[np.roll(ids, -1, axis=1)]
    >>> c = TokenComparison(measure_tokens(logits, logits, ids), float("inf"), {"sqnr_db": float("inf")}, [4], 4)
    >>> v = assess(c, "float").verdict
    >>> v.outcome, v.rule
    (<Outcome.OK: 'OK'>, 'budget-ppl-increase')
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from mobilize.accuracy.generation import TokenMeasures
from mobilize.accuracy.metrics import sqnr_from_powers
from mobilize.core.outcome import Outcome


@dataclasses.dataclass
class TokenComparison:
    """A decoder file against the float model on the same held-out token ids: what ``assess`` judges for the
    ``generation`` task (the other tasks' :class:`~mobilize.accuracy.metrics.Comparison`)."""

    tokens: TokenMeasures
    logits_sqnr_db: float | None
    """The file's teacher-forced logits against the float model's, over every position (float64)."""
    cache: dict[str, Any]
    """The file's cache check (:func:`mobilize.compare.decoder_worker.cache_check`): ``sqnr_db``, ``positions``..."""
    continuation_match_tokens: list[int]
    """Per prompt, greedy tokens equal to the float model's before the first difference."""
    continuation_tokens: int
    """How long each greedy continuation is."""
    task: str = "generation"

    def to_json(self) -> dict[str, Any]:
        """report.json's ``accuracy`` of a decoder file (the keys every task's accuracy carries first)."""
        finite = self.logits_sqnr_db if self.logits_sqnr_db is not None and math.isfinite(self.logits_sqnr_db) \
            else None
        return {"sqnr_db": finite, "cosine": None, "max_abs": None, **self.tokens.to_json(),
                "logits_sqnr_db": self.logits_sqnr_db, "cache": self.cache,
                "continuation_match_tokens": list(self.continuation_match_tokens),
                "continuation_tokens": self.continuation_tokens}


def _db(value: float) -> str:
    return "exact" if math.isinf(value) and value > 0 else f"{value:.1f} dB"


TWO_ROUNDINGS_DB = sqnr_from_powers(2.0, 1.0)
"""How far under the file's own distance from the float model its decode steps may sit from its prefill: two
independent roundings of that size differ by twice its power, 3.01 dB."""


def cache_floor(fixed: float, minimum: float, prefill_sqnr_db: float | None) -> tuple[float, str]:
    """The SQNR a file's decode steps must reach against its own prefill, and the words for it: ``fixed`` (the
    policy's floor for the file's promise), or, for a file whose prefill is itself under ``fixed`` + 3 dB from the
    float model on those positions, 3 dB under that distance, but never under ``minimum``.

    A quantized kernel rounds a one-token step and a many-token prefill differently, and a model whose layers
    amplify rounding carries the difference to the logits: int4 files on a random Llama-3.2-1B shape, 4-7 dB from
    the float model, have steps 27.4-28.0 dB from their prefill, under the fixed 30 dB with no cache wrong
    (llama.cpp's Q4_K_M among them).  A broken cache puts the steps at another context's answers: 7 dB on
    zoo:tiny_lm.

        >>> cache_floor(30.0, 20.0, 45.0)[0], cache_floor(30.0, 20.0, 26.0)[0] == 26.0 - TWO_ROUNDINGS_DB
        (30.0, True)
        >>> cache_floor(30.0, 20.0, 5.0)[0], cache_floor(30.0, 20.0, None)
        (20.0, (30.0, '30 dB'))
    """
    if prefill_sqnr_db is None or not math.isfinite(prefill_sqnr_db) or prefill_sqnr_db - TWO_ROUNDINGS_DB >= fixed:
        return fixed, f"{fixed:g} dB"
    own = prefill_sqnr_db - TWO_ROUNDINGS_DB
    if own <= minimum:
        return minimum, (f"{minimum:g} dB (the file is itself {_db(prefill_sqnr_db)} from the float model on those "
                         f"positions; the floor its rounding sets is under the least the policy takes, {minimum:g} dB)")
    return own, (f"{own:.1f} dB (3 dB under the file's own {_db(prefill_sqnr_db)} from the float model on those "
                 f"positions: two roundings that size apart; the fixed floor is {fixed:g} dB)")


def judge_decoder_fidelity(c: TokenComparison, kind: str, policy: Any) -> Any:
    """The file against the model it was built from (``kind``: float or quantized, the variant's promise)."""
    from mobilize.accuracy.verify import Verdict

    float_file = str(kind) == "float"
    fixed = policy.float_min_sqnr_db if float_file else policy.reduced_min_sqnr_db
    floor, floor_said = cache_floor(fixed, min(fixed, policy.cache_min_sqnr_db), c.cache.get("prefill_sqnr_db"))
    cache_db = float(c.cache.get("sqnr_db", float("nan")))
    numbers = {"cache_sqnr_db": cache_db, "cache_positions": c.cache.get("positions"),
               "cache_floor_db": floor, "logits_sqnr_db": c.logits_sqnr_db}
    if float_file and c.logits_sqnr_db is not None and not c.logits_sqnr_db >= policy.float_min_sqnr_db:
        return Verdict(Outcome.MISMATCH, "float-sqnr", f"teacher-forced logits at {_db(c.logits_sqnr_db)} against the "
                       f"float model, below {policy.float_min_sqnr_db:g} dB: a float file must match it to rounding "
                       f"(rule float-sqnr)", numbers)
    if not cache_db >= floor:
        return Verdict(Outcome.MISMATCH, "cache-consistency", f"the file's decode steps give {_db(cache_db)} against "
                       f"its own prefill of the same positions, below {floor_said}: its KV cache is wrong "
                       f"(rule cache-consistency)", numbers)
    rule = "float-sqnr" if float_file else "cache-consistency"
    what = (f"logits {_db(c.logits_sqnr_db)} against the float model, " if float_file and c.logits_sqnr_db is not None
            else "") + f"cache {_db(cache_db)} against its own prefill"
    if floor < fixed:
        what += f", at or above {floor_said}"
    return Verdict(Outcome.OK, rule, f"{what} (rule {rule})", numbers)


def continuation_match(reference: Sequence[Sequence[int]], got: Sequence[Sequence[int]]) -> list[int]:
    """Per prompt, how many greedy tokens match the float model's before the first difference."""
    out = []
    for want, have in zip(reference, got):
        n = 0
        while n < min(len(want), len(have)) and want[n] == have[n]:
            n += 1
        out.append(n)
    return out


def judge_tokens(c: TokenComparison, policy: Any) -> Any:
    """The quality half: the perplexity increase on held-out text against the budget (``--max-ppl-increase``)."""
    from mobilize.accuracy.verify import Verdict

    t = c.tokens
    numbers = {**t.to_json(), "continuation_match_tokens": list(c.continuation_match_tokens),
               "continuation_tokens": c.continuation_tokens, "max_ppl_increase_percent": policy.max_ppl_increase_percent}
    interval = f"95% CI {t.ppl_increase_percent_low:+.1f} to {t.ppl_increase_percent_high:+.1f}"
    said = (f"perplexity {t.candidate_ppl:.3g} vs {t.reference_ppl:.3g} float ({t.ppl_increase_percent:+.2f}%, "
            f"{interval}), next-token agreement {100 * t.top1_agreement:.1f}% on {t.tokens} tokens")
    budget = policy.max_ppl_increase_percent
    if t.ppl_increase_percent > budget:
        return Verdict(Outcome.OVER_BUDGET, "budget-ppl-increase", f"{said}: over the --max-ppl-increase budget of "
                       f"{budget:g}% (rule budget-ppl-increase)", numbers)
    return Verdict(Outcome.OK, "budget-ppl-increase", f"{said}: within the --max-ppl-increase budget of {budget:g}% "
                   f"(rule budget-ppl-increase)", numbers)


def judge_siblings(verdicts: Mapping[str, dict[str, Any]], siblings: Mapping[str, str]) -> dict[str, Any]:
    """The quantized files whose float sibling is MISMATCH, each with its new verdict (rule ``float-sibling``).

    ``verdicts``: each file's verdict (``Verdict.to_json``) by variant name, those checked in this run; ``siblings``:
    a quantized variant's name -> its tool's float file (``DecoderVariant.float_sibling``).  A file that already
    failed or is MISMATCH keeps its own verdict; one that is OK, VACUOUS or OVER_BUDGET is MISMATCH, naming the
    sibling's rule and figures: onnxruntime-genai's builder, on a Llama with linear rope scaling, gave an fp32 file
    25-36 dB from the model and an int4 file whose +2.33% perplexity was within budget.

        >>> bad = {"outcome": "MISMATCH", "rule": "float-sqnr", "reason": "teacher-forced logits at 35.6 dB against "
        ...        "the float model, below 60 dB: a float file must match it to rounding (rule float-sqnr)"}
        >>> ok = {"outcome": "OK", "rule": "budget-ppl-increase", "reason": "perplexity 9.1 vs 9.0 (rule ...)"}
        >>> [v] = judge_siblings({"f": bad, "q": ok}, {"q": "f"}).values()
        >>> v.outcome, v.rule, "export error" in v.reason
        (<Outcome.MISMATCH: 'MISMATCH'>, 'float-sibling', True)
        >>> judge_siblings({"f": {**bad, "outcome": "OK"}, "q": ok}, {"q": "f"}), judge_siblings({"q": ok}, {"q": "f"})
        ({}, {})
    """
    from mobilize.accuracy.verify import Verdict

    out = {}
    for name, sibling in siblings.items():
        own, theirs = verdicts.get(name), verdicts.get(sibling)
        if not own or not theirs or theirs.get("outcome") != Outcome.MISMATCH:
            continue
        if own.get("outcome") not in (Outcome.OK, Outcome.VACUOUS, Outcome.OVER_BUDGET):
            continue
        said = str(theirs.get("reason", "")).rstrip(".")
        own_said = str(own.get("reason", "")).split(" (rule ")[0]
        reason = (f"its float sibling {sibling}, made by the same tool without quantizing, is MISMATCH: {said}; "
                  f"an export error, not quantization's - this file's own check ({own_said}; {own.get('outcome')}) "
                  f"does not clear it (rule float-sibling)")
        out[name] = Verdict(Outcome.MISMATCH, "float-sibling", reason,
                            {"sibling": sibling, "sibling_rule": theirs.get("rule"),
                             "own_outcome": str(own.get("outcome")), "own_rule": own.get("rule")},
                            fidelity=own.get("fidelity"), quality=own.get("quality"),
                            reference_warning=own.get("reference_warning"))
    return out
