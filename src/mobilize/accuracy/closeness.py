"""Two closeness checks beside the verify core's verdicts: a bundled program's element-wise promise
(:func:`verify_close`, allclose) and a quantized operation's output in quantization steps (:func:`judge_steps`).
Both return the core's :class:`~mobilize.accuracy.verify.Verdict`, each naming its rule.

    >>> import torch
    >>> verify_close([torch.ones(3)], [torch.ones(3)], atol=1e-6, rtol=0).rule
    'allclose'
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from mobilize.accuracy.metrics import as_float64
from mobilize.accuracy.verify import DEFAULT_POLICY, Policy, Verdict
from mobilize.core.outcome import Outcome


def judge_steps(what: str, elements: int, within_one_step: int, policy: Policy = DEFAULT_POLICY) -> Verdict:
    """A quantized operation's own output against the reference's, in quantization steps (rule op-steps)."""
    fraction = within_one_step / elements if elements else 1.0
    numbers = {"elements": elements, "within_one_step": within_one_step, "within_fraction": fraction,
               "min_within_fraction": policy.op_min_within_one_step}
    if fraction < policy.op_min_within_one_step:
        return Verdict(Outcome.MISMATCH, "op-steps", f"{what}: {fraction:.2%} of {elements} elements within one "
                                                     f"quantization step < {policy.op_min_within_one_step:.0%} "
                                                     f"(rule op-steps)", numbers)
    return Verdict(Outcome.OK, "op-steps", f"{what}: {fraction:.2%} of {elements} elements within one quantization "
                                           f"step >= {policy.op_min_within_one_step:.0%} (rule op-steps)", numbers)


def verify_close(got: Sequence[Any], expected: Sequence[Any], atol: float, rtol: float) -> Verdict:
    """Element-wise |got - expected| <= atol + rtol * |expected| (a bundled program's promise)."""
    worst, worst_excess = 0.0, -math.inf
    if len(got) != len(expected):
        return Verdict(Outcome.MISMATCH, "shape", f"{len(got)} output(s), expected {len(expected)} (rule shape)")
    for g, e in zip(got, expected):
        g, e = as_float64(g), as_float64(e)
        if g.shape != e.shape:
            return Verdict(Outcome.MISMATCH, "shape", f"output shape {tuple(g.shape)}, expected {tuple(e.shape)} "
                                                      f"(rule shape)")
        diff = (g - e).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        if diff.numel():
            worst_excess = max(worst_excess, float((diff - (atol + rtol * e.abs())).max()))
    numbers = {"max_abs_error": worst, "atol": atol, "rtol": rtol}
    if not math.isfinite(worst) or worst_excess > 0:
        return Verdict(Outcome.MISMATCH, "allclose", f"max abs error {worst:.3g} exceeds atol {atol:.2g} + rtol "
                                                     f"{rtol:.2g} x |expected| (rule allclose)", numbers)
    return Verdict(Outcome.OK, "allclose", f"max abs error {worst:.3g} within atol {atol:.2g} + rtol {rtol:.2g} x "
                                           f"|expected| (rule allclose)", numbers)
