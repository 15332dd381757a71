"""Budgets for first outputs whose per-sample cosine cannot judge them (issue #40 items 8 and 9), with the
thresholds of the one :class:`~mobilize.accuracy.verify.Policy`; :func:`~mobilize.accuracy.verify.judge_budget`
calls it in place of the cosine budget.

    >>> import torch
    >>> from mobilize.accuracy.metrics import compare_outputs
    >>> from mobilize.accuracy.verify import assess
    >>> probs = [[torch.tensor([[p]])] for p in (0.1, 0.4, 0.6, 0.9)]
    >>> off = [[t + 0.2] for (t,) in probs]
    >>> v = assess(compare_outputs(off, probs), "quantized").verdict
    >>> v.outcome, v.rule
    (<Outcome.OVER_BUDGET: 'OVER_BUDGET'>, 'budget-one-value-error')
"""

from __future__ import annotations

import dataclasses

from mobilize.accuracy.metrics import FirstOutput, sqnr_from_powers
from mobilize.accuracy.verify import DEFAULT_POLICY, Policy, Verdict, _num
from mobilize.core.outcome import Outcome


def judge_shape(verdict: Verdict, first: FirstOutput | None, policy: Policy = DEFAULT_POLICY) -> Verdict | None:
    """The budget for a first output whose per-sample cosine cannot judge it, else None.  One value per sample (its
    cosine is its sign): the largest error over the reference's largest value and the decision agreement at the
    output's threshold (rules ``budget-one-value-error``, ``budget-one-value-decision``; ``budget-one-value``
    when within; over a stateful model's stream ``budget-stream-error``, ``budget-stream-decisions`` and
    ``budget-stream``, which then decides the verdict).  A near-empty map (:func:`near_empty_map`; the cosine of an
    empty sample is 0): the largest error over the output's scale (rule ``budget-near-zero-map``)."""
    if first is None or verdict.outcome != Outcome.OK:
        return None
    if is_one_value(first):
        return _one_value(verdict, first, policy)
    if near_empty_map(first, policy):
        err = first.max_abs / first.scale
        numbers = {**verdict.numbers, **_map_numbers(first), "error_of_scale": err,
                   "max_error_of_range": policy.near_zero_map_max_error_of_range}
        said = verdict.rule.endswith("-near-zero-map")  # its floor already described the map
        what = f"{'its' if said else _map_text(first) + ':'} max error {err:.2g} of the output's {_scale_text(first)}"
        if err > policy.near_zero_map_max_error_of_range:
            return Verdict(Outcome.OVER_BUDGET, "budget-near-zero-map",
                           f"{what} > budget {policy.near_zero_map_max_error_of_range:g} (rule budget-near-zero-map)",
                           numbers)
        return dataclasses.replace(verdict, numbers=numbers, reason=(
            f"{verdict.reason}; {what} within budget {policy.near_zero_map_max_error_of_range:g} "
            f"(rule budget-near-zero-map)"))
    return None


def near_empty_map(first: FirstOutput | None, policy: Policy = DEFAULT_POLICY) -> bool:
    """The float model's first output is a near-empty map: nearly every value near 0 (within
    ``NEAR_ZERO_OF_SCALE`` of its scale) and at least one sample empty, so neither its cosine nor its SQNR can
    judge it (a classifier's probabilities are near 0 but for one class per row: no row is empty)."""
    return (first is not None and first.values_per_sample > 1 and first.scale > 0 and first.empty_samples > 0
            and first.near_zero_share >= policy.near_zero_map_min_zero_share)


def judge_near_zero_floor(first: FirstOutput | None, kind: str, floor: float, sqnr_db: float,
                          numbers: dict, policy: Policy = DEFAULT_POLICY) -> Verdict | None:
    """For :func:`~mobilize.accuracy.verify.judge`, where the SQNR is below the kind's floor: on a near-empty map
    the SQNR reads a float kernel's absolute rounding (~1e-7) against values near 0 (a sigmoid map of 1e-6), not
    the map, so the floor is judged on the error over the output's scale in dB (a peak SNR, rule
    ``<kind>-near-zero-map``).  None when the output is no near-empty map, or is off by that measure too."""
    if not near_empty_map(first, policy) or first.max_abs == 0:
        return None
    peak_db = sqnr_from_powers(first.scale ** 2, first.max_abs ** 2)  # a peak SNR: the scale over the max error
    if peak_db < floor:
        return None
    rule = f"{kind}-near-zero-map"
    return Verdict(Outcome.OK, rule, (
        f"SQNR {sqnr_db:.1f} dB < {floor:g} dB reads rounding on values near 0, not the map: {_map_text(first)}; "
        f"its max error is {peak_db:.1f} dB below the output's {_scale_text(first)} >= {floor:g} dB (rule {rule})"),
        {**numbers, **_map_numbers(first), "error_of_scale_db": round(peak_db, 2), "floor_db": floor})


def _map_numbers(first: FirstOutput) -> dict:
    return {"reference_zero_share": first.zero_share, "reference_near_zero_share": first.near_zero_share,
            "reference_empty_samples": first.empty_samples, "reference_range": first.range,
            "reference_scale": first.scale}


def _map_text(first: FirstOutput) -> str:
    from mobilize.accuracy.metrics import NEAR_ZERO_OF_SCALE

    return (f"a near-empty map ({first.near_zero_share:.2%} of the float model's values are within "
            f"{NEAR_ZERO_OF_SCALE:g} of its scale from 0, {first.empty_samples} sample(s) empty, where a cosine "
            f"or an SQNR reads only rounding)")


def _scale_text(first: FirstOutput) -> str:
    return "scale 1 (a probability)" if first.scale == 1.0 and first.range <= 1.0 else f"range {first.scale:.3g}"


def one_value_facts(first: FirstOutput, policy: Policy = DEFAULT_POLICY) -> tuple[dict, str]:
    """(numbers, words) of a first output with one value per sample (or per call of a stream): its largest error over
    the float model's largest value and its decisions at the output's threshold - what judges it, where a cosine
    is only its sign (also in a MISMATCH verdict's reason and numbers, where the SQNR floor decided)."""
    err, agree = first.relative_error, first.decision_agreement
    cut = "0.5 (a probability)" if first.decision_threshold == 0.5 else f"{first.decision_threshold:g} (a logit)"
    numbers = {"one_value_relative_error": _num(err),
               "one_value_max_relative_error": policy.one_value_max_relative_error,
               "decision_threshold": first.decision_threshold, "decision_agreement": agree,
               "decision_flips": first.decision_flips,
               "min_decision_agreement": policy.one_value_min_decision_agreement}
    if first.stream_calls:
        numbers["stream_calls"] = first.stream_calls
        what = (f"streamed from {first.stream_start}: max error {err:.2%} of the float model's largest value, decisions "
                f"at {cut} agree {agree:.1%} ({first.decision_flips} of {first.stream_calls} calls flipped)")
    else:
        what = (f"one value per sample (its cosine is only its sign): max error {err:.2%} of the float model's "
                f"largest value, decisions at {cut} agree {agree:.1%} ({first.decision_flips} flipped)")
    return numbers, what


def is_one_value(first: FirstOutput | None) -> bool:
    return first is not None and first.values_per_sample == 1 and first.decision_agreement is not None


def _one_value(verdict: Verdict, first: FirstOutput, policy: Policy) -> Verdict:
    """One value per sample, or per call of a stateful model's stream (rules ``budget-stream-error``,
    ``budget-stream-decisions``, ``budget-stream``: the decisions as the model makes them, its state carried)."""
    err, agree = first.relative_error, first.decision_agreement
    rule = "budget-stream" if first.stream_calls else "budget-one-value"
    facts, what = one_value_facts(first, policy)
    numbers = {**verdict.numbers, **facts}
    decision = f"{rule}-decisions" if first.stream_calls else f"{rule}-decision"
    over_error = err > policy.one_value_max_relative_error
    over_decisions = agree < policy.one_value_min_decision_agreement
    if over_decisions and (first.stream_calls or not over_error):  # streamed, a flipped decision tells the most
        return Verdict(Outcome.OVER_BUDGET, decision, f"{what}: agreement < budget "
                       f"{policy.one_value_min_decision_agreement:.0%} (rule {decision})", numbers)
    if over_error:
        return Verdict(Outcome.OVER_BUDGET, f"{rule}-error", f"{what}: error > budget "
                       f"{policy.one_value_max_relative_error:.1%} (rule {rule}-error)", numbers)
    return dataclasses.replace(verdict, rule=rule if first.stream_calls else verdict.rule, numbers=numbers, reason=(
        f"{verdict.reason}; {what} within budgets {policy.one_value_max_relative_error:.1%} and "
        f"{policy.one_value_min_decision_agreement:.0%} (rule {rule})"))
