"""The one verify core: reference + candidate outputs + a policy -> a verdict that names its rule.

``optimize`` (artifact vs the prepared model), bundled programs (the file vs its bundled
expected outputs) and ``compare`` (every variant vs the float model) all decide here, with the
thresholds of one :class:`Policy` and nowhere else.

A candidate is **broken** (MISMATCH) when its outputs are not what its kind promises: NaN or
inf; other output count, shape; for a float candidate an error far beyond fp32 rounding; for
a quantized one an SQNR below a floor, or agreement with the reference near chance counting
only hard flips (a flipped near tie is counted and reported, never failed).  A working
candidate that loses more than the user's budget is **over budget**.  Everything else is OK.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Sequence

from mobilize.accuracy.metrics import Comparison, FirstOutput, as_float64, compare_outputs
from mobilize.core.errors import ConfigError
from mobilize.core.outcome import Outcome

__all__ = ["Kind", "Policy", "Verdict", "Assessment", "assess", "judge", "judge_budget", "judge_task", "judge_steps", "verify_close", "compare_outputs",
           "DEFAULT_POLICY", "degenerate_reference", "against_both", "FIDELITY", "QUALITY"]

FIDELITY = "the model it was exported from"
"""What a fidelity verdict measures against: the prepared module (after the passes), to the exporter's promise."""
QUALITY = "the float model"
"""What a quality verdict measures against: the user's float model on the data, to the budget."""


class Kind(enum.StrEnum):
    """What a candidate promises about its outputs."""

    FLOAT = "float"
    """fp32 arithmetic: equal to the reference up to rounding (sums reordered, BN folded)."""
    REDUCED = "reduced"
    """fp16 / bf16 arithmetic."""
    QUANTIZED = "quantized"
    """int8 (or lower) arithmetic."""
    CHANGED = "changed"
    """The passes changed the model itself (structured pruning, zeroed weights, a fine-tune): it promises no
    arithmetic closeness to the float model, so no SQNR floor applies; agreement near chance is still broken,
    and the budget (the task's measure) decides the rest."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """Every threshold a verdict uses.  Measured here: fp32 variants agree with eager at 97-130 dB;
    static int8 at 25-31 dB; a float model with 1% weight noise at ~35 dB."""

    float_min_sqnr_db: float = 60.0
    """fp32 candidates: 60 dB is a relative RMS error of 0.1%, 1000x rounding error yet far below any real bug."""
    reduced_min_sqnr_db: float = 30.0
    """fp16/bf16 candidates (bf16 keeps 8 bits of mantissa: ~40-50 dB end to end)."""
    cache_min_sqnr_db: float = 20.0
    """A decoder file's cache check is never passed under this, however far the file's rounding takes it from the
    float model (:func:`mobilize.accuracy.decoder_verdict.cache_floor`): a cache that drops the context (stale
    after the prefill, or each step on its own) gives 6.9-7.1 dB on zoo:tiny_lm's held-out text; int4 files'
    one-token steps against their own prefill on random Qwen2.5-0.5B and Llama-3.2-1B shapes, 27.4-34.4 dB."""
    quantized_min_sqnr_db: float = 8.0
    """int8 candidates below this (relative RMS error 40%) compute something else."""
    quantized_min_agreement_gain: float = 0.5
    """int8 classifiers must close at least this fraction of the gap from chance to full agreement
    (counting hard flips only); below it the answers are near chance."""
    max_drop_points: float = 1.0
    """Budget on labelled data: top-1 points a variant may lose against the float model."""
    min_cosine: float = 0.99
    """Budget without labels (or for embeddings): mean per-sample cosine to the float outputs.  0.99 is
    a relative error of ~14% per sample, the usual bar for retrieval embeddings; int8 logits reach 0.995+."""
    one_value_max_relative_error: float = 0.05
    """Budget for an output of one value per sample (a speech probability, a score), whose cosine is only its sign
    and passes anything: the largest error over the float model's largest value (int8 steps of a [0, 1]
    probability are 0.4%; the voice-activity file that flips 4 of 32 decisions is 0.15 off)."""
    one_value_min_decision_agreement: float = 0.99
    """Budget for an output of one value per sample: the share of samples on the float model's side of the
    output's threshold (0.5 for a probability in [0, 1], 0 for a logit), as --min-cosine asks of a vector."""
    near_zero_map_min_zero_share: float = 0.999
    """A float output at least this share near 0 - within ``metrics.NEAR_ZERO_OF_SCALE`` of the output's scale (1
    for probabilities, else its range), with at least one sample empty - is a near-empty map (a text detector's
    on photos without text): the cosine of an empty sample is 0 whatever the error (float files at 120 dB read
    cosine 0.93), so it is judged by ``near_zero_map_max_error_of_range`` instead."""
    near_zero_map_max_error_of_range: float = 0.02
    """Budget for a near-empty map: the largest error over the output's range (max - min over the samples); 2%
    is five int8 steps, far above a float file's 1e-7."""
    degenerate_min_rms: float = 1.18e-35
    """A float reference whose output RMS is below this is not represented at full precision in float32: 1000x
    float32's smallest normal (1.18e-38), the margin the 60 dB float floor needs once an engine flushes the
    subnormals below it to 0 (XNNPACK does).  Random-init MobileViT's logits: ~1e-40; checks against it are
    vacuous, and no export is blamed for its scale."""
    op_min_within_one_step: float = 0.99
    """A quantized operation checked on its own (the NNAPI host check feeds each one the CPU twin's values of
    its inputs): this fraction of its elements must be within one quantization step of the twin's output.
    NNAPI's reference rounds twice in fixed point where qnnpack rounds once in float, so single steps are
    rounding; below 99% the operation computes something else."""
    output_steps_max_ratio: float = 2.0
    """An int8 file against its int8 twin (rule output-steps): the RMS and the largest of their output differences,
    in steps, may be this multiple of the rounding model's (each op moved +-1 step on the share its own check
    found, propagated) and at least 1 step.  Measured/model RMS 0.68-1.40 over 2-sample checks (MobileNetV2,
    digits-trained 96 and seeded 64/224); largest never above the model's."""

    degenerate_max_spread: float = 1e-3
    """A float reference whose outputs vary across samples by less than this (RMS of the per-element standard
    deviation across samples over the outputs' RMS) does not depend on its input: checks against it are vacuous.
    Random-init ToyClassifier: 3e-6; random-init MobileNetV2: 0.39; trained models: 0.5-1."""
    degenerate_max_top1_share: float = 0.9
    """A float classifier giving one class for at least this share of the samples (with at least
    ``degenerate_min_samples`` of them) is near-constant: random-init MobileNetV1 gives one class for 58 of 64."""
    degenerate_min_samples: int = 16
    """Fewer samples than this say nothing about the top-1 share."""
    max_ppl_increase_percent: float = 5.0
    """Budget for a causal LM: the increase of its perplexity on held-out text (teacher-forced, every next token)
    over the float model's, in percent, that a variant may cost (``--max-ppl-increase``): a few percent is the bar
    int4 weight schemes are held to."""
    near_uniform_ppl_share: float = 0.5
    """A causal LM reference whose held-out perplexity is at least this share of its vocabulary size (a uniform
    guess scores the vocabulary size) predicts next to nothing: checks against it are vacuous.  The shipped
    ``zoo:tiny_lm`` scores under 1% of its vocabulary; a random-init decoder ~100%."""
    near_uniform_entropy_share: float = 0.9
    """A causal LM reference whose mean next-token entropy is at least this share of log(vocabulary size) is
    near uniform whatever the text (vacuous too).  Random-init Llama configs: above 0.99."""

    def __post_init__(self) -> None:
        """A budget that cannot decide anything (NaN, infinite, more than all 100 points) is the user's mistake:
        refused here, so every command and the Python API say so the same way, before any work."""
        if not (math.isfinite(self.max_drop_points) and 0 <= self.max_drop_points <= 100):
            raise ConfigError(f"--max-drop must be a number of top-1 points from 0 to 100, got {self.max_drop_points}")
        if not (math.isfinite(self.min_cosine) and 0 < self.min_cosine <= 1):
            raise ConfigError(f"--min-cosine must be in (0, 1], got {self.min_cosine}")
        for f in dataclasses.fields(self):
            if f.name not in ("max_drop_points", "min_cosine") and not math.isfinite(getattr(self, f.name)):
                what = POLICY_FLAGS.get(f.name, f"policy {f.name}")  # the flag the user typed, where there is one
                raise ConfigError(f"{what} must be a finite number, got {getattr(self, f.name)}")

    def to_json(self, task: str | None = None) -> dict[str, Any]:
        """The thresholds; for a model without classes (``task`` not classification) without the top-1 ones."""
        data = dataclasses.asdict(self)
        if task not in (None, "classification"):
            for name in ("quantized_min_agreement_gain", "degenerate_max_top1_share"):
                data.pop(name)
        return data


POLICY_FLAGS = {"max_drop_points": "--max-drop", "min_cosine": "--min-cosine",
                "max_ppl_increase_percent": "--max-ppl-increase"}
"""The command-line flag that sets each threshold a user can set (the others are named as policy fields)."""

DEFAULT_POLICY = Policy()


@dataclasses.dataclass
class Verdict:
    outcome: Outcome
    rule: str
    """The rule that decided: ``float-sqnr``, ``quantized-agreement``, ``budget-top1-drop``, ``allclose`` ..."""
    reason: str
    """One sentence with the numbers that decided."""
    numbers: dict[str, Any] = dataclasses.field(default_factory=dict)
    fidelity: dict[str, Any] | None = None
    """The file vs the model it was exported from (``against``, outcome, rule, reason, numbers); None when not
    measured (no file, or the check was not run)."""
    quality: dict[str, Any] | None = None
    """The file vs the float model on the data, to the budget; None when not measured."""
    reference_warning: str | None = None
    """Set when the float reference is degenerate (the verdict is then VACUOUS)."""

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.OK

    def part(self, against: str) -> dict[str, Any]:
        """This verdict as one half of a combined one."""
        return {"against": against, "outcome": str(self.outcome), "rule": self.rule, "reason": self.reason,
                "numbers": self.numbers}

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "outcome": str(self.outcome), "rule": self.rule, "reason": self.reason,
                "numbers": self.numbers, "fidelity": self.fidelity, "quality": self.quality,
                "reference_warning": self.reference_warning}


def judge(c: Comparison, kind: Kind | str, policy: Policy = DEFAULT_POLICY) -> Verdict:
    """Broken or working: the correctness half of a verdict (no budget)."""
    kind = Kind(kind)
    if c.shape_error:
        return Verdict(Outcome.MISMATCH, "shape", f"{c.shape_error} (rule shape)")
    if not c.finite:
        return Verdict(Outcome.MISMATCH, "finite", "the outputs contain NaN or inf (rule finite)")
    sqnr = c.sqnr_db
    cosine = c.cosine_mean
    numbers = {"sqnr_db": _num(sqnr), "max_abs": c.max_abs, "samples": c.samples,
               "cosine": None if cosine is None else _num(cosine)}
    if c.task in (None, "classification"):  # a model without classes has no top-1 figures
        numbers.update(top1_agreement=c.top1_agreement, flips=c.flips, hard_flips=c.hard_flips,
                       near_tie_flips=c.near_tie_flips)
    floor = {Kind.FLOAT: policy.float_min_sqnr_db, Kind.REDUCED: policy.reduced_min_sqnr_db,
             Kind.QUANTIZED: policy.quantized_min_sqnr_db, Kind.CHANGED: None}[kind]
    rule = f"{kind}-sqnr" if floor is not None else "changed-model"
    flips = _flip_text(c) + (f"; over a stream of {c.stream['calls']} calls, the state carried" if c.stream else "")
    if floor is not None and sqnr < floor:
        from mobilize.accuracy.shapes import is_one_value, judge_near_zero_floor, one_value_facts

        shaped = judge_near_zero_floor(c.first, str(kind), floor, sqnr, numbers, policy)
        if shaped is not None:  # a near-empty map: its floor is judged on the error over the output's scale
            return shaped
        promise = {Kind.FLOAT: "a float variant must match the float model to rounding error",
                   Kind.REDUCED: "a reduced-precision float variant must stay close to the float model",
                   Kind.QUANTIZED: "a quantized variant this far off computes something else"}[kind]
        cosine = f" (mean cosine {numbers['cosine']:.4f})" if numbers["cosine"] is not None else ""
        if is_one_value(c.first):  # its cosine is only its sign: say the error and the decisions it flipped
            facts, what = one_value_facts(c.first, policy)
            numbers, cosine = {**numbers, **facts}, f" ({what})"
        return Verdict(Outcome.MISMATCH, rule, f"SQNR {sqnr:.1f} dB < {floor:g} dB{cosine}: {promise} (rule {rule})"
                                               f"{flips}", numbers)
    if kind != Kind.FLOAT and c.top1_agreement is not None and c.chance_agreement is not None and c.samples >= 10:
        chance = c.chance_agreement
        need = chance + policy.quantized_min_agreement_gain * (1 - chance)
        # a changed model's outputs all move far, so "within its error of a tie" excuses every flip: count them all
        agree, counted = ((c.top1_agreement, "all flips") if floor is None else (c.hard_agreement, "hard flips only"))
        if chance < 1.0 and agree < need:
            agreement = "changed-agreement" if floor is None else "quantized-agreement"
            return Verdict(Outcome.MISMATCH, agreement,
                           f"top-1 agreement {agree:.1%} ({counted}) is near chance {chance:.1%}: "
                           f"needs {need:.1%} (rule {agreement}){flips}", numbers)
    if floor is None:
        return Verdict(Outcome.OK, rule, f"SQNR {_db(sqnr)} against the float model, no floor: the passes changed the "
                                         f"model itself, the budget decides (rule {rule}){flips}", numbers)
    return Verdict(Outcome.OK, rule, f"SQNR {_db(sqnr)} >= {floor:g} dB (rule {rule}){flips}", numbers)


def judge_budget(verdict: Verdict, *, drop_points: float | None = None, drop_ci: tuple[float, float] | None = None,
                 cosine: float | None = None, labelled: bool, policy: Policy = DEFAULT_POLICY,
                 first: FirstOutput | None = None) -> Verdict:
    """The budget half: a working candidate that loses more than the budget is OVER_BUDGET.  Where the cosine
    budget says nothing about ``first`` (the first output's figures: one value per sample, or a near-empty
    map), :func:`judge_shape` judges in its place."""
    if verdict.outcome != Outcome.OK:
        return verdict
    if labelled and drop_points is not None:
        ci = f" (95% CI {drop_ci[0]:+.2f} to {drop_ci[1]:+.2f})" if drop_ci else ""
        numbers = {**verdict.numbers, "top1_drop_points": drop_points, "max_drop_points": policy.max_drop_points}
        if drop_points > policy.max_drop_points:
            return Verdict(Outcome.OVER_BUDGET, "budget-top1-drop",
                           f"top-1 drop {drop_points:+.2f} points{ci} > budget {policy.max_drop_points:g} "
                           f"(rule budget-top1-drop)", numbers)
        return dataclasses.replace(verdict, numbers=numbers,
                                   reason=f"{verdict.reason}; top-1 drop {drop_points:+.2f} points{ci} within "
                                          f"budget {policy.max_drop_points:g}")
    from mobilize.accuracy.shapes import judge_shape

    shaped = judge_shape(verdict, first, policy) if cosine is not None else None
    if shaped is not None:
        return shaped
    if cosine is not None:
        numbers = {**verdict.numbers, "cosine": cosine, "min_cosine": policy.min_cosine}
        if cosine < policy.min_cosine:
            return Verdict(Outcome.OVER_BUDGET, "budget-cosine",
                           f"mean cosine {cosine:.4f} < budget {policy.min_cosine:g} (rule budget-cosine)", numbers)
        return dataclasses.replace(verdict, numbers=numbers,
                                   reason=f"{verdict.reason}; mean cosine {cosine:.4f} within budget "
                                          f"{policy.min_cosine:g}")
    return verdict


def judge_task(verdict: Verdict, c: Comparison, policy: Policy = DEFAULT_POLICY) -> Verdict:
    """The budget half for a task measure: a drop beyond --max-drop is OVER_BUDGET (rule ``budget-*-drop``); for
    embeddings and raw outputs --min-cosine decides and the measure is reported beside it."""
    m = c.task_measure
    if m is None or m.rule == "cosine" or m.drop is None:
        out = judge_budget(verdict, cosine=c.cosine_mean, labelled=False, policy=policy, first=c.first)
        if m is not None and out.outcome != Outcome.MISMATCH:
            out = dataclasses.replace(out, reason=f"{out.reason}; {m.text()}",
                                      numbers={**out.numbers, "task_measure": m.measure, "task_value": m.value})
        return out
    if verdict.outcome != Outcome.OK:
        return verdict
    ci = m.drop_ci()
    ci_text = f" (95% CI {ci[0]:+.2f} to {ci[1]:+.2f})" if ci else ""
    ref = f"{m.reference:.1f}%" if m.percent else f"{m.reference:.4g}"
    what = f"{m.text()} vs the float model's {ref}: drop {m.drop:+.2f}{' points' if m.percent else ''}{ci_text}"
    numbers = {**verdict.numbers, "task_measure": m.measure, "task_value": m.value, "task_reference": m.reference,
               "task_drop": m.drop, "max_drop_points": policy.max_drop_points}
    if m.drop > policy.max_drop_points:
        return Verdict(Outcome.OVER_BUDGET, m.rule, f"{what} > budget {policy.max_drop_points:g} (rule {m.rule})",
                       numbers)
    return dataclasses.replace(verdict, numbers=numbers,
                               reason=f"{verdict.reason}; {what} within budget {policy.max_drop_points:g}")


@dataclasses.dataclass
class Assessment:
    """A candidate's quality verdict against the float model, with the figures it was decided on."""

    verdict: Verdict
    reference_top1: float | None = None
    """The float model's top-1 (%) on the same labelled samples (None without labels or for a non-classifier)."""
    drop_points: float | None = None
    drop_ci: tuple[float, float] | None = None
    """95% interval of the paired top-1 drop (:func:`mobilize.accuracy.stats.paired_drop_ci`)."""
    mcnemar_p: float | None = None
    cosine_ci: tuple[float, float] | None = None

    def accuracy_json(self) -> dict[str, Any]:
        """The figures compare's report.json carries beside the comparison's own."""
        out: dict[str, Any] = {}
        if self.drop_points is not None:
            out.update(top1_reference=self.reference_top1, top1_drop=self.drop_points, top1_drop_ci95=list(self.drop_ci),
                       top1_drop_mcnemar_p=self.mcnemar_p,
                       top1_drop_significant=not (self.drop_ci[0] <= 0.0 <= self.drop_ci[1]))
        if self.cosine_ci is not None:
            out["cosine_ci95"] = list(self.cosine_ci)
        return out


def assess(c: Comparison, kind: Kind | str, policy: Policy = DEFAULT_POLICY, *,
           reference_correct: Sequence[bool] | None = None, fidelity: Verdict | None = None,
           reference_warning: str | None = None) -> Assessment:
    """The one way a candidate's outputs become its verdict (compare, tune and the arm64 check all call it, for
    every task; a decoder's :class:`~mobilize.accuracy.decoder_verdict.TokenComparison` is judged by its own two
    halves, :mod:`mobilize.accuracy.decoder_verdict`):
    broken or working (:func:`judge`), then the budget - the task's own measure when ``c`` carries one or the
    model is not a classifier (:func:`judge_task`), else the top-1 drop against ``reference_correct`` (the float
    model's per-sample correctness on the same labelled samples) or, unlabelled, the mean cosine
    (:func:`judge_budget`) - then the two halves (:func:`against_both`) with the fidelity verdict if there is one."""
    from mobilize.accuracy.stats import mcnemar_p, mean_ci, paired_drop_ci

    if c.task == "generation":  # a decoder's halves: its cache and logits, then perplexity on held-out text
        from mobilize.accuracy.decoder_verdict import judge_decoder_fidelity, judge_tokens

        built = judge_decoder_fidelity(c, kind, policy)
        if fidelity is not None and not fidelity.ok:
            built = fidelity
        return Assessment(against_both(built, judge_tokens(c, policy), reference_warning))
    verdict = judge(c, kind, policy)
    out = Assessment(verdict)
    if reference_correct is not None and c.correct is not None:
        out.reference_top1 = 100.0 * sum(reference_correct) / len(reference_correct)
        out.drop_points = out.reference_top1 - c.top1
        out.drop_ci = paired_drop_ci(reference_correct, c.correct)
        out.mcnemar_p = mcnemar_p(reference_correct, c.correct)
    if c.cosine:
        out.cosine_ci = mean_ci(c.cosine)
    if c.task_measure is not None or c.task not in (None, "classification"):
        verdict = judge_task(verdict, c, policy)
    else:
        verdict = judge_budget(verdict, drop_points=out.drop_points, drop_ci=out.drop_ci, cosine=c.cosine_mean,
                               labelled=out.drop_points is not None, policy=policy, first=c.first)
    out.verdict = against_both(fidelity, verdict, reference_warning)
    return out


def degenerate_reference(reference: Sequence[Sequence[Any]], policy: Policy = DEFAULT_POLICY,
                         task: str | None = None) -> str | None:
    """A warning when the float reference's first output does not depend on its input (all zero, constant across
    samples, or - for a classifier, ``task`` None or classification - one top-1 class for nearly every sample),
    else None.  Checks against such a reference are vacuous.

        >>> import torch
        >>> degenerate_reference([[torch.zeros(1, 10)] for _ in range(4)]).split(":")[0]
        'WARNING'
        >>> degenerate_reference([[torch.randn(1, 10)] for _ in range(4)]) is None
        True
    """
    import torch

    if len(reference) < 2 or not reference[0]:
        return None
    first = torch.cat([as_float64(s[0]).reshape(1, -1) for s in reference])
    if not bool(torch.isfinite(first).all()):
        return None
    tiny = _subnormal(reference, policy)
    if tiny is not None:
        return tiny
    rms = float(first.pow(2).mean().sqrt())
    fix = "train or load weights; random init gives near-constant outputs"
    n = len(reference)
    if rms == 0:
        what = f"is exactly 0 for all {n} samples"
    else:
        spread = float(first.std(0).pow(2).mean().sqrt()) / rms
        share = None
        if first.shape[1] > 2 and n >= policy.degenerate_min_samples and task in (None, "classification"):
            import collections

            share = collections.Counter(first.argmax(1).tolist()).most_common(1)[0][1] / n
        if spread < policy.degenerate_max_spread:
            what = (f"does not depend on the input (spread across {n} samples {spread:.1e} of its RMS < "
                    f"{policy.degenerate_max_spread:g})")
        elif share is not None and share >= policy.degenerate_max_top1_share:
            what = (f"gives one top-1 class for {share:.0%} of {n} samples (>= "
                    f"{policy.degenerate_max_top1_share:.0%})")
        else:
            return None
    return (f"WARNING: the float model's output {what}: every accuracy check against it is vacuous "
            f"(rule vacuous-reference); fix: {fix}")


SUBNORMAL_RULE = "vacuous-subnormal-reference"
"""The rule of a reference too small for float32: every numeric difference from it is its scale, not the file's."""


def _subnormal(reference: Sequence[Sequence[Any]], policy: Policy) -> str | None:
    """The warning for a reference output whose RMS float32 does not represent at full precision (rule
    ``vacuous-subnormal-reference``), else None.  Exact zeros are exact: an all-zero output is not this."""
    import torch

    tiny = torch.finfo(torch.float32).tiny
    for i in range(len(reference[0])):
        values = [as_float64(s[i]) for s in reference if len(s) > i]
        count = sum(v.numel() for v in values)
        rms = math.sqrt(math.fsum(float(v.pow(2).sum()) for v in values) / count) if count else 0.0
        if 0 < rms < policy.degenerate_min_rms:
            name = "" if len(reference[0]) == 1 else f" {i}"
            where = "subnormal, below" if rms < tiny else "near subnormal, barely above"
            return (f"WARNING: the float model's output{name} is {where} float32's smallest normal {tiny:.3g} (RMS "
                    f"{rms:.2g} < {policy.degenerate_min_rms:.3g}, the least float32 holds at full precision): engines "
                    f"flush such values to 0 or keep a few bits of them, so every accuracy check against it is vacuous "
                    f"and no export is blamed for its scale "
                    f"(rule {SUBNORMAL_RULE}); fix: train or load weights (random init can give outputs this small), "
                    f"or scale the outputs into float32's normal range")
    return None


def against_both(fidelity: Verdict | None, quality: Verdict | None, reference_warning: str | None = None) -> Verdict:
    """One verdict from its two halves: fidelity (the file vs the model it was exported from) and quality (vs the
    float model, to the budget).  A file that is not what its exporter promised is decided by fidelity; one that
    would be OK against a degenerate reference is VACUOUS (rule ``vacuous-reference``), since agreeing with a
    near-constant output proves nothing; else the quality half decides (MISMATCH and OVER_BUDGET stand)."""
    if fidelity is None and quality is None:
        raise ValueError("against_both needs at least one half")
    # a reference float32 cannot hold at full precision: every numeric difference from it is its scale, so only a
    # wrong shape or NaN still blames the file, and neither half says MISMATCH for less
    scale = bool(reference_warning) and f"(rule {SUBNORMAL_RULE})" in reference_warning
    if scale:
        fidelity, quality = (_scale_only(v) for v in (fidelity, quality))
    halves = [(FIDELITY, fidelity), (QUALITY, quality)]
    parts = {name: (v.part(against) if v else None) for name, (against, v) in zip(("fidelity", "quality"), halves)}
    broken = next((v for _, v in halves if v and v.outcome == Outcome.MISMATCH and v.rule in ("shape", "finite")), None)
    if broken is None and not scale:
        broken = fidelity if fidelity and not fidelity.ok else None
    if broken is not None:
        decided = broken
    elif reference_warning and (scale or (quality or fidelity).ok):
        decided = Verdict(Outcome.VACUOUS, SUBNORMAL_RULE if scale else "vacuous-reference",
                          reference_warning.removeprefix("WARNING: "), (quality or fidelity).numbers)
    else:
        decided = quality or fidelity
    named = list(zip(("fidelity", "quality"), halves))
    if decided is quality:
        named.reverse()  # the half that decided comes first
    vacuous = decided.outcome == Outcome.VACUOUS
    text = "; ".join(f"{name} vs {against}: {_half_text(v, vacuous)}" for name, (against, v) in named if v)
    reason = f"{decided.reason}; {text}" if decided.outcome == Outcome.VACUOUS else text
    return Verdict(decided.outcome, decided.rule, reason, decided.numbers, parts["fidelity"], parts["quality"],
                   reference_warning)


def _half_text(v: Verdict, vacuous: bool) -> str:
    """One half's words in the verdict's reason.  Under a VACUOUS verdict a half that met its budget reads as
    what it is, figures against a reference that proves nothing, never as a pass ("mean cosine 1.0000 within
    budget" under VACUOUS read as one)."""
    if not v.ok:
        return f"{v.outcome} {v.reason}"
    if vacuous:
        return (f"not a pass, its figures are against a vacuous reference: "
                f"{v.reason.replace(' within budget ', ' vs budget ')}")
    return v.reason


def _scale_only(v: Verdict | None) -> Verdict | None:
    """A half measured against a subnormal reference: a numeric failure (not shape or NaN) is VACUOUS, its figures
    kept."""
    if v is None or v.ok or v.rule in ("shape", "finite"):
        return v
    return Verdict(Outcome.VACUOUS, SUBNORMAL_RULE, f"{v.reason}, against a reference too small for float32: its "
                                                    f"scale, not the file (rule {SUBNORMAL_RULE})", v.numbers)


def _flip_text(c: Comparison) -> str:
    if not c.flips:
        return ""
    return (f"; {c.flips} top-1 flip(s) in {c.samples} samples: {c.near_tie_flips} near tie(s) (margin within the "
            f"variant's own error there), {c.hard_flips} hard")


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _db(x: float) -> str:
    return "exact (inf dB)" if x == math.inf else f"{x:.1f} dB"


from mobilize.accuracy.closeness import judge_steps, verify_close  # noqa: E402  (they build this module's Verdicts)
