"""How a candidate's outputs differ from the reference's, sample by sample, output by output.

Every figure is computed in float64 on outputs divided by the reference's RMS (per output), so
logits of 1e-19 give the same SQNR and cosine as logits of 1 (in float32 their squares
underflow).  Tuple and dict outputs are compared output by output, by name.  For classifier
logits a top-1 flip is split by what caused it: a *near tie* (the reference's top-1 margin on
that sample was no larger than the candidate's own error there) or a *hard flip* (the margin
was larger: the candidate changed a clear answer).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

Outputs = Sequence[Any]
"""One sample's outputs: a list of tensors (a model's tuple/dict outputs, flattened in order)."""


@dataclasses.dataclass
class OutputError:
    """One output (by position/name) over all samples."""

    name: str
    max_abs: float
    mean_abs: float
    sqnr_db: float
    """10·log10(Σref² / Σ(out−ref)²) on scale-normalised values; inf when identical."""
    cosine_mean: float
    cosine_min: float
    discrete: bool = False
    """Integer or bool values (class ids, counts): a changed id is not noise, so SQNR is not judged on it while
    another output is continuous (the task's measure compares ids)."""


@dataclasses.dataclass
class FirstOutput:
    """The first output's figures that say whether a per-sample cosine (which reads only that output) can judge it:
    of one value per sample its cosine is only the value's sign, and of a sample whose reference is all zeros it is
    0 whatever the candidate's error."""

    values_per_sample: int
    zero_share: float
    """Share of the reference's values that are exactly 0 (a text detector's map on photos without text: 99.9%+)."""
    range: float
    """The reference's largest value minus its smallest, over every sample."""
    peak: float
    """The reference's largest magnitude."""
    max_abs: float
    """The largest |candidate - reference|."""
    scale: float = 0.0
    """The unit the output is read in: 1 for probabilities (every reference value in [0, 1], a map thresholded at
    0.3-0.5), else ``range``.  A float engine's transcendental kernels (ONNX Runtime's logistic) err by ~1e-7 of
    it whatever the value, so on values near 0 their SQNR reads 30-45 dB while the map is the same."""
    near_zero_share: float = 0.0
    """Share of the reference's values within ``NEAR_ZERO_OF_SCALE`` x ``scale`` of 0 (a sigmoid map on photos
    without text is 1e-6, never exactly 0)."""
    empty_samples: int = 0
    """Samples whose every reference value is near 0 (their cosine and SQNR read only rounding)."""
    decision_threshold: float | None = None
    """One value per sample: where its decision flips, 0.5 when every reference value is a probability in [0, 1],
    else 0 (a logit)."""
    decision_agreement: float | None = None
    """One value per sample: the share of samples on the reference's side of ``decision_threshold``."""
    decision_flips: int = 0
    stream_calls: int | None = None
    """A stateful model: the figures are over a stream of this many calls in order, the state carried
    (:mod:`mobilize.accuracy.stream`); None: one call per sample."""
    stream_start: str = "a zero state"
    """Where the stream starts: a zero state (state as an input), or a module's reset (state kept inside it)."""

    @property
    def relative_error(self) -> float:
        """``max_abs`` over the reference's largest magnitude (0 when both are 0)."""
        return self.max_abs / self.peak if self.peak else (0.0 if self.max_abs == 0 else math.inf)


@dataclasses.dataclass
class Comparison:
    """A candidate against the reference on the same samples (what a verdict is decided on)."""

    samples: int
    outputs: list[OutputError]
    finite: bool
    """False when the candidate produced NaN or inf."""
    shape_error: str | None = None
    """Set when the outputs do not have the reference's count, shapes or dtypes."""
    top1_agreement: float | None = None
    """Fraction of samples whose arg-max matches the reference's (classifier outputs only)."""
    flips: int = 0
    hard_flips: int = 0
    """Flips where the reference's top-1 margin exceeded the candidate's error on that sample."""
    near_tie_flips: int = 0
    chance_agreement: float | None = None
    """Agreement a constant guess would reach: the most common reference class's share."""
    cosine: list[float] = dataclasses.field(default_factory=list)
    """Per-sample cosine similarity of the first output (scale-normalised)."""
    correct: list[bool] | None = None
    """Per sample: the candidate's top-1 equals the label (labelled classifier data only)."""
    task: str | None = None
    """The model's task (mobilize.accuracy.tasks): top-1 figures exist only for ``classification``."""
    task_measure: Any = None
    """The task's own measure against the float model (a ``tasks.TaskMeasure``), None when top-1 says it."""
    first: FirstOutput | None = None
    """The first output's shape figures (None when not finite): whether its cosine can judge it."""
    stream: dict[str, Any] | None = None
    """A stateful model judged over a stream (:func:`mark_stream`): ``calls`` and the state ``pairs``."""

    @property
    def sqnr_db(self) -> float:
        judged = [o for o in self.outputs if not o.discrete] or self.outputs
        return min((o.sqnr_db for o in judged), default=math.inf)

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for o in self.outputs), default=0.0)

    @property
    def cosine_mean(self) -> float | None:
        return math.fsum(self.cosine) / len(self.cosine) if self.cosine else None

    @property
    def top1(self) -> float | None:
        return 100.0 * sum(self.correct) / len(self.correct) if self.correct else None

    @property
    def hard_agreement(self) -> float | None:
        """Agreement counting only hard flips as disagreements."""
        return None if self.top1_agreement is None else 1.0 - self.hard_flips / max(self.samples, 1)

    def to_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else x

        data = {
            "samples": self.samples, "finite": self.finite, "shape_error": self.shape_error,
            "max_abs": num(self.max_abs) if self.finite else None,
            "sqnr_db": num(self.sqnr_db) if self.finite else None,
            "sqnr_exact": self.finite and self.shape_error is None and self.sqnr_db == math.inf,
            "cosine": num(self.cosine_mean) if self.finite else None,
            "cosine_min": num(min(self.cosine)) if self.cosine and self.finite else None,
            "top1_agreement": self.top1_agreement, "flips": self.flips, "hard_flips": self.hard_flips,
            "near_tie_flips": self.near_tie_flips, "chance_agreement": self.chance_agreement,
            "top1": self.top1,
            "outputs": [{k: num(v) if isinstance(v, float) else v for k, v in dataclasses.asdict(o).items()}
                        for o in self.outputs],
        }
        if self.task not in (None, "classification"):  # no class, no top-1 figures
            data = {k: v for k, v in data.items() if "top1" not in k and "flips" not in k and k != "chance_agreement"}
        if self.task:
            data["task"] = self.task
        if self.task_measure is not None:
            data["task_measure"] = self.task_measure.to_json()
        if self.stream is not None:
            data["stream"] = self.stream
        if self.first is not None and self.finite:
            data["first_output"] = {**dataclasses.asdict(self.first), "relative_error": num(self.first.relative_error)}
        return data


_DISCRETE = {"torch.bool", "torch.uint8", "torch.int8", "torch.int16", "torch.int32", "torch.int64"}


def as_float64(t: Any):
    import torch

    t = t if isinstance(t, torch.Tensor) else torch.as_tensor(t)
    if t.is_quantized:
        t = t.dequantize()
    return t.detach().to(torch.float64)


def compare_outputs(candidate: Sequence[Outputs], reference: Sequence[Outputs], labels: Sequence[int] | None = None,
                    names: Sequence[str] | None = None) -> Comparison:
    """Compare per-sample output lists (each sample: the model's outputs, flattened)."""
    import torch

    n = len(reference)
    if len(candidate) != n:
        return Comparison(n, [], True, f"{len(candidate)} candidate samples for {n} reference samples")
    counts = {len(s) for s in candidate} | {len(s) for s in reference}
    if len(counts) != 1:
        return Comparison(n, [], True, f"the candidate returns {len(candidate[0])} output(s), the reference "
                                       f"{len(reference[0])}")
    k = counts.pop()
    names = list(names or [f"output{i}" for i in range(k)])
    cand = [[as_float64(t) for t in s] for s in candidate]
    ref = [[as_float64(t) for t in s] for s in reference]
    for i in range(k):
        if any(c[i].shape != r[i].shape for c, r in zip(cand, ref)):
            c0, r0 = next((c[i], r[i]) for c, r in zip(cand, ref) if c[i].shape != r[i].shape)
            return Comparison(n, [], True, f"{names[i]} has shape {tuple(c0.shape)}, the reference {tuple(r0.shape)}")
    finite = all(bool(torch.isfinite(t).all()) for s in cand for t in s)
    outputs = []
    for i in range(k):
        r_all = torch.cat([s[i].reshape(1, -1) for s in ref])
        c_all = torch.cat([s[i].reshape(1, -1) for s in cand])
        if not finite:
            outputs.append(OutputError(names[i], math.nan, math.nan, math.nan, math.nan, math.nan))
            continue
        scale = float(r_all.pow(2).mean().sqrt()) or float(c_all.pow(2).mean().sqrt()) or 1.0
        rn, cn = r_all / scale, c_all / scale
        diff = c_all - r_all
        noise = float((cn - rn).pow(2).sum())
        signal = float(rn.pow(2).sum())
        sqnr = sqnr_from_powers(signal, noise)
        cos = _cosines(cn, rn)
        discrete = all(str(torch.as_tensor(s[i]).dtype) in _DISCRETE for s in candidate)
        outputs.append(OutputError(names[i], float(diff.abs().max()), float(diff.abs().mean()), sqnr,
                                   math.fsum(cos) / len(cos), min(cos), discrete))
    result = Comparison(n, outputs, finite)
    if finite:
        first_c = torch.cat([s[0].reshape(1, -1) for s in cand])
        first_r = torch.cat([s[0].reshape(1, -1) for s in ref])
        result.cosine = _cosines(first_c, first_r)
        result.first = _first_output(first_c, first_r)
        if first_r.shape[1] > 1 and all(s[0].numel() == first_r.shape[1] for s in ref):
            _top1(result, first_c, first_r, labels)
    return result


def mark_stream(c: Comparison, calls: int, pairs: str, start: str = "a zero state") -> Comparison:
    """Say that ``c`` compares a stateful model's stream of ``calls`` calls from ``start``, the state carried as
    ``pairs`` says (the one-value budget then names the stream rules)."""
    c.stream = {"calls": calls, "state": pairs}
    if c.first is not None:
        c.first.stream_calls = calls
        c.first.stream_start = start
    return c


def _cosines(c, r) -> list[float]:
    """Per-row cosine similarity in float64 (1.0 when both rows are zero, 0.0 when one is)."""
    dots = (c * r).sum(1)
    norms = c.norm(dim=1) * r.norm(dim=1)
    out = []
    for d, nrm, cz, rz in zip(dots.tolist(), norms.tolist(), (c.abs().sum(1) == 0).tolist(), (r.abs().sum(1) == 0).tolist()):
        out.append(1.0 if cz and rz else (0.0 if nrm == 0 else max(-1.0, min(1.0, d / nrm))))
    return out


NEAR_ZERO_OF_SCALE = 1e-3
"""A reference value within this share of its output's ``scale`` of 0 is near zero: 1e-3 is the relative error the
60 dB float floor allows, far below any threshold a map is read at."""


def _first_output(c, r) -> FirstOutput:
    """The first output's figures (``c``, ``r``: one row per sample)."""
    if not r.numel():
        return FirstOutput(r.shape[1], 1.0, 0.0, 0.0, 0.0)
    value_range = float(r.max() - r.min())
    scale = 1.0 if bool(((r >= 0) & (r <= 1)).all()) else value_range
    near = r.abs() <= NEAR_ZERO_OF_SCALE * scale
    first = FirstOutput(r.shape[1], float((r == 0).double().mean()), value_range, float(r.abs().max()),
                        float((c - r).abs().max()), scale, float(near.double().mean()), int(near.all(1).sum()))
    if r.shape[1] == 1 and r.numel():
        threshold = 0.5 if bool(((r >= 0) & (r <= 1)).all()) else 0.0
        flipped = (c > threshold) != (r > threshold)
        first.decision_threshold, first.decision_flips = threshold, int(flipped.sum())
        first.decision_agreement = 1.0 - float(flipped.double().mean())
    return first


def _top1(result: Comparison, c, r, labels: Sequence[int] | None) -> None:
    import collections

    c_top, r_top = c.argmax(1), r.argmax(1)
    flipped = (c_top != r_top)
    top2 = r.topk(2, dim=1).values
    margin = top2[:, 0] - top2[:, 1]
    err = (c - r).abs().max(1).values
    hard = flipped & (margin > err)
    result.top1_agreement = 1.0 - float(flipped.double().mean())
    result.flips = int(flipped.sum())
    result.hard_flips = int(hard.sum())
    result.near_tie_flips = result.flips - result.hard_flips
    counts = collections.Counter(r_top.tolist())
    result.chance_agreement = max(counts.values()) / len(r_top)
    if labels is not None:
        import torch

        y = torch.as_tensor(list(labels)).reshape(-1)
        if len(y) == len(c_top):
            result.correct = (c_top == y).tolist()


def top1(outputs: Sequence[Any], labels: Sequence[Any]) -> float:
    """Top-1 accuracy in percent of batched logits against labels."""
    import torch

    preds = torch.cat([as_float64(o).reshape(len(o), -1).argmax(1) for o in outputs])
    y = torch.cat([torch.as_tensor(l).reshape(-1) for l in labels])
    return 100.0 * float((preds == y).double().mean())


def sqnr_from_powers(signal: float, noise: float) -> float:
    """10·log10(signal / noise): inf when there is no noise, -inf when there is no signal.  The one SQNR formula
    (:func:`sqnr_db` and every comparison in this module reach it)."""
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


SQNR_CHUNK = 1 << 22
"""Elements :func:`sqnr_db` converts to float64 at a time."""


def sqnr_db(reference: Any, candidate: Any) -> float:
    """The SQNR of ``candidate`` against ``reference`` (arrays or tensors of one shape), in float64.

        >>> import numpy as np
        >>> round(sqnr_db(np.ones(4), np.ones(4) * 1.1), 1), sqnr_db(np.ones(4), np.ones(4))
        (20.0, inf)
    """
    import numpy as np

    ref, got = np.broadcast_arrays(np.asarray(reference.detach().cpu() if hasattr(reference, "detach") else reference),
                                   np.asarray(candidate.detach().cpu() if hasattr(candidate, "detach") else candidate))
    ref, got = ref.reshape(-1), got.reshape(-1)  # shapes that do not broadcast raise, as the whole-array form did
    signal = noise = 0.0
    for at in range(0, max(ref.size, 1), SQNR_CHUNK):  # float64 a chunk at a time: a 0.5B decoder's held-out
        r = ref[at:at + SQNR_CHUNK].astype(np.float64)  # logits are 1.25 GB of float32 (20 s, 5 GB as one array)
        d = got[at:at + SQNR_CHUNK].astype(np.float64) - r
        signal += float(r @ r)
        noise += float(d @ d)
    return sqnr_from_powers(signal, noise)
