"""A decoder file's verdict, from the one Policy: fidelity to the model it was built from, quality against the
float model on held-out text, each naming its rule.

- **fidelity**: a float file's teacher-forced logits against the float model's (``float-sqnr``: the exporter's
  promise, rounding only); every file's cache against its own prefill (``cache-consistency``: the same positions
  decoded one token at a time; a float file to the float floor, a quantized one to the reduced floor).
- **quality**: VACUOUS when the float reference is near uniform (``vacuous-reference``: agreeing with a model that
  predicts nothing proves nothing); OVER_BUDGET when the perplexity rises more than the budget
  (``budget-ppl-increase``, the point estimate; its paired-bootstrap interval over sequences is reported).

    >>> from mobilize.accuracy.generation import measure_tokens
    >>> import numpy as np
    >>> ids = np.random.default_rng(0).integers(0, 8, size=(4, 6))
    >>> logits = 4.0 * np.eye(8)[np.roll(ids, -1, axis=1)]
    >>> v = assess_decoder("float", 120.0, {"sqnr_db": float("inf")}, measure_tokens(logits, logits, ids), [1.0])
    >>> v.outcome, v.rule
    (<Outcome.OK: 'OK'>, 'budget-ppl-increase')
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from mobilize.accuracy.verify import DEFAULT_POLICY, Policy, Verdict
from mobilize.core.outcome import Outcome


def _db(value: float) -> str:
    return "exact" if math.isinf(value) and value > 0 else f"{value:.1f} dB"


def fidelity(promise: str, logits_sqnr_db: float | None, cache: dict[str, Any], policy: Policy) -> Verdict:
    """The file against the model it was built from."""
    floor = policy.float_min_sqnr_db if promise == "float" else policy.reduced_min_sqnr_db
    cache_db = float(cache.get("sqnr_db", float("nan")))
    numbers = {"cache_sqnr_db": cache_db, "cache_positions": cache.get("positions"), "logits_sqnr_db": logits_sqnr_db}
    if promise == "float" and logits_sqnr_db is not None and not logits_sqnr_db >= policy.float_min_sqnr_db:
        return Verdict(Outcome.MISMATCH, "float-sqnr", f"teacher-forced logits at {_db(logits_sqnr_db)} against the "
                       f"float model, below {policy.float_min_sqnr_db:g} dB: a float file must match it to rounding "
                       f"(rule float-sqnr)", numbers)
    if not cache_db >= floor:
        return Verdict(Outcome.MISMATCH, "cache-consistency", f"the file's decode steps give {_db(cache_db)} against "
                       f"its own prefill of the same positions, below {floor:g} dB: its KV cache is wrong "
                       f"(rule cache-consistency)", numbers)
    rule = "float-sqnr" if promise == "float" else "cache-consistency"
    what = (f"logits {_db(logits_sqnr_db)} against the float model, " if promise == "float" else "") + \
           f"cache {_db(cache_db)} against its own prefill"
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


def assess_decoder(promise: str, logits_sqnr_db: float | None, cache: dict[str, Any], tokens: Any,
                   matches: Sequence[float], policy: Policy = DEFAULT_POLICY) -> Verdict:
    """Fidelity first (a broken file is MISMATCH whatever its quality), then quality to the budget."""
    faithful = fidelity(promise, logits_sqnr_db, cache, policy)
    numbers = {**tokens.to_json(), "continuation_match_tokens": list(matches), **faithful.numbers}
    parts = {"fidelity": faithful.part("the model it was built from")}
    if not faithful.ok:
        return Verdict(faithful.outcome, faithful.rule, faithful.reason, numbers, **parts)
    interval = f"95% CI {tokens.ppl_increase_percent_low:+.1f} to {tokens.ppl_increase_percent_high:+.1f}"
    said = (f"perplexity {tokens.candidate_ppl:.3g} vs {tokens.reference_ppl:.3g} float ({tokens.ppl_increase_percent:+.2f}%, "
            f"{interval}), next-token agreement {100 * tokens.top1_agreement:.1f}% on {tokens.tokens} tokens")
    if tokens.near_uniform:
        quality = Verdict(Outcome.VACUOUS, "vacuous-reference", f"{said}; but the float model is near uniform "
                          f"({tokens.near_uniform_reason}): agreeing with it proves nothing - train or load weights "
                          f"(rule vacuous-reference)", numbers)
    elif tokens.ppl_increase_percent > policy.max_ppl_increase_percent:
        quality = Verdict(Outcome.OVER_BUDGET, "budget-ppl-increase", f"{said}: over the "
                          f"{policy.max_ppl_increase_percent:g}% budget (rule budget-ppl-increase)", numbers)
    else:
        quality = Verdict(Outcome.OK, "budget-ppl-increase", f"{said}: within the {policy.max_ppl_increase_percent:g}% "
                          f"budget (rule budget-ppl-increase)", numbers)
    return Verdict(quality.outcome, quality.rule, f"{quality.reason}; fidelity: {faithful.reason}", numbers,
                   fidelity=parts["fidelity"], quality=quality.part("the float model on held-out text"),
                   reference_warning=quality.reason if tokens.near_uniform else None)
