"""A decoder file's two verdict halves, from the one Policy; :func:`mobilize.accuracy.verify.assess` joins them
(with :func:`~mobilize.accuracy.verify.against_both`, the one verdict assembly), as it does for every task.

- **fidelity** (:func:`judge_decoder_fidelity`): a float file's teacher-forced logits against the float model's
  (``float-sqnr``: the exporter's promise, rounding only); every file's cache against its own prefill
  (``cache-consistency``: the same positions decoded one token at a time; a float file to the float floor, a
  quantized one to the reduced floor).
- **quality** (:func:`judge_tokens`): OVER_BUDGET when the perplexity on held-out text rises more than the budget
  (``budget-ppl-increase``, the point estimate; its paired-bootstrap interval over sequences is reported).  A
  near-uniform float reference is the reference's warning (rule ``vacuous-reference``), found once by the
  reference stage (:func:`mobilize.accuracy.generation.near_uniform`), and makes an OK file VACUOUS.

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
from typing import Any, Sequence

from mobilize.accuracy.generation import TokenMeasures
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


def judge_decoder_fidelity(c: TokenComparison, kind: str, policy: Any) -> Any:
    """The file against the model it was built from (``kind``: float or quantized, the variant's promise)."""
    from mobilize.accuracy.verify import Verdict

    float_file = str(kind) == "float"
    floor = policy.float_min_sqnr_db if float_file else policy.reduced_min_sqnr_db
    cache_db = float(c.cache.get("sqnr_db", float("nan")))
    numbers = {"cache_sqnr_db": cache_db, "cache_positions": c.cache.get("positions"),
               "logits_sqnr_db": c.logits_sqnr_db}
    if float_file and c.logits_sqnr_db is not None and not c.logits_sqnr_db >= policy.float_min_sqnr_db:
        return Verdict(Outcome.MISMATCH, "float-sqnr", f"teacher-forced logits at {_db(c.logits_sqnr_db)} against the "
                       f"float model, below {policy.float_min_sqnr_db:g} dB: a float file must match it to rounding "
                       f"(rule float-sqnr)", numbers)
    if not cache_db >= floor:
        return Verdict(Outcome.MISMATCH, "cache-consistency", f"the file's decode steps give {_db(cache_db)} against "
                       f"its own prefill of the same positions, below {floor:g} dB: its KV cache is wrong "
                       f"(rule cache-consistency)", numbers)
    rule = "float-sqnr" if float_file else "cache-consistency"
    what = (f"logits {_db(c.logits_sqnr_db)} against the float model, " if float_file and c.logits_sqnr_db is not None
            else "") + f"cache {_db(cache_db)} against its own prefill"
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
