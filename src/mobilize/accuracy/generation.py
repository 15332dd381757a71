"""Token-level measures of a causal LM against its float reference, teacher-forced on held-out text.

Both sides read the same token ids; at every position but the last each predicts the next token.  Measured:
next-token top-1 agreement with the reference, each side's perplexity on the true next tokens, the perplexity
increase in percent with a paired bootstrap 95% interval over sequences, and whether the reference is near
uniform (then every check against it is vacuous).  Engine-free: logits come in as numpy arrays or tensors,
``(N, T, V)`` or a list of ``(T, V)`` / ``(1, T, V)``.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> ids = rng.integers(0, 8, size=(4, 6))
    >>> logits = 4.0 * np.eye(8)[np.roll(ids, -1, axis=1)] + rng.normal(size=(4, 6, 8))
    >>> m = measure_tokens(logits, logits, ids)
    >>> m.top1_agreement, m.ppl_increase_percent, (m.ppl_increase_percent_low, m.ppl_increase_percent_high)
    (1.0, 0.0, (0.0, 0.0))
    >>> m.near_uniform, measure_tokens(np.zeros((4, 6, 8)), logits, ids).near_uniform
    (False, True)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator, Sequence

import numpy as np

from mobilize.accuracy.stats import BOOTSTRAP_RESAMPLES, mean_ci
from mobilize.accuracy.verify import DEFAULT_POLICY, Policy
from mobilize.core.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class SequenceScores:
    """One side's scores on each sequence: the mean negative log-likelihood of the true next tokens (nats), the
    mean entropy of its next-token distribution (nats) and its top-1 next token at every scored position."""

    nll_nats: np.ndarray
    """(N,) mean over the sequence's T-1 scored positions."""
    entropy_nats: np.ndarray
    """(N,)"""
    top1: np.ndarray
    """(N, T-1) int64"""
    vocab_size: int

    @property
    def perplexity(self) -> float:
        """exp of the mean NLL over every scored token (the sequences have equal length)."""
        return math.exp(float(self.nll_nats.mean()))


@dataclasses.dataclass(frozen=True)
class TokenMeasures:
    """A candidate's next-token measures against the reference on the same held-out token ids."""

    sequences: int
    tokens: int
    """Scored next-token predictions: sequences x (T - 1)."""
    vocab_size: int
    top1_agreement: float
    """Share of scored positions where the candidate's most likely next token is the reference's (0-1)."""
    reference_ppl: float
    candidate_ppl: float
    ppl_increase_percent: float
    """100 x (candidate_ppl / reference_ppl - 1): exp of the mean paired per-sequence NLL difference."""
    ppl_increase_percent_low: float
    ppl_increase_percent_high: float
    """The paired bootstrap 95% interval of ppl_increase_percent, resampling sequences."""
    reference_entropy_share: float
    """The reference's mean next-token entropy over log(vocab_size): 1 is uniform."""
    near_uniform: bool
    """The reference predicts next to nothing (Policy ``near_uniform_*``): checks against it are vacuous."""
    near_uniform_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _sequences(logits: Any) -> Iterator[np.ndarray]:
    """Each sequence's (T, V) logits, from (N, T, V) or a list of (T, V) / (1, T, V)."""
    items = logits if isinstance(logits, (list, tuple)) else list(_as_numpy(logits))
    for item in items:
        array = _as_numpy(item)
        yield array.reshape(array.shape[-2:]) if array.ndim == 3 and array.shape[0] == 1 else array


def _as_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().float().cpu().numpy()
    return np.asarray(value)


def score_sequences(logits: Any, ids: Any) -> SequenceScores:
    """Per-sequence next-token NLL and entropy (float64 log-softmax), and the top-1 tokens, of one side."""
    ids = _as_numpy(ids).astype(np.int64)
    nll, entropy, top1 = [], [], []
    for i, seq in enumerate(_sequences(logits)):
        if i >= len(ids) or seq.ndim != 2 or seq.shape[0] != ids.shape[1]:
            raise ConfigError(f"logits of sequence {i} have shape {seq.shape}; expected ({ids.shape[1]}, vocab) "
                              f"for {len(ids)} sequences of {ids.shape[1]} token ids")
        if ids[i].max() >= seq.shape[1] or ids[i].min() < 0:
            raise ConfigError(f"token ids of sequence {i} fall outside the logits' vocabulary of {seq.shape[1]}")
        x = seq[:-1].astype(np.float64)
        x -= x.max(axis=-1, keepdims=True)
        e = np.exp(x)  # once: log p = x - log Z, entropy = log Z - sum(e x) / Z (a 0.5B vocabulary: 2x faster)
        z = e.sum(axis=-1)
        log_z = np.log(z)
        nll.append((log_z - x[np.arange(len(x)), ids[i, 1:]]).mean())
        entropy.append((log_z - np.einsum("tv,tv->t", e, x) / z).mean())
        top1.append(seq[:-1].argmax(axis=-1))
    if len(nll) != len(ids) or ids.shape[1] < 2:
        raise ConfigError(f"got logits for {len(nll)} sequences and {len(ids)} sequences of {ids.shape[1]} token ids; "
                          "each side needs one (T, vocab) logits per sequence, T >= 2")
    return SequenceScores(np.asarray(nll), np.asarray(entropy), np.stack(top1).astype(np.int64), int(seq.shape[-1]))


def near_uniform(reference: SequenceScores, policy: Policy = DEFAULT_POLICY) -> str | None:
    """Why the reference predicts next to nothing (perplexity or entropy close to a uniform guess's), or None."""
    ppl, vocab = reference.perplexity, reference.vocab_size
    share = float(reference.entropy_nats.mean()) / math.log(vocab)
    if ppl >= policy.near_uniform_ppl_share * vocab:
        return (f"the reference's held-out perplexity {ppl:.1f} is {ppl / vocab:.0%} of its vocabulary size {vocab} "
                f"(a uniform guess): it predicts next to nothing (untrained?)")
    if share >= policy.near_uniform_entropy_share:
        return (f"the reference's next-token entropy is {share:.0%} of a uniform distribution's (log {vocab}): "
                f"it predicts next to nothing (untrained?)")
    return None


def measure_tokens(reference_logits: Any, candidate_logits: Any, ids: Any, policy: Policy = DEFAULT_POLICY,
                   resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> TokenMeasures:
    """Every token-level measure of a candidate against the reference on the same ids (``(N, T)`` int)."""
    ref = score_sequences(reference_logits, ids)
    cand = score_sequences(candidate_logits, ids)
    if cand.vocab_size != ref.vocab_size:
        raise ConfigError(f"the candidate's vocabulary has {cand.vocab_size} entries, the reference's {ref.vocab_size}")
    low, high = _increase_ci(ref.nll_nats, cand.nll_nats, resamples, seed)
    reason = near_uniform(ref, policy)
    return TokenMeasures(
        sequences=len(ref.nll_nats), tokens=int(ref.top1.size), vocab_size=ref.vocab_size,
        top1_agreement=float((ref.top1 == cand.top1).mean()),
        reference_ppl=ref.perplexity, candidate_ppl=cand.perplexity,
        ppl_increase_percent=_percent(float((cand.nll_nats - ref.nll_nats).mean())),
        ppl_increase_percent_low=low, ppl_increase_percent_high=high,
        reference_entropy_share=float(ref.entropy_nats.mean()) / math.log(ref.vocab_size),
        near_uniform=reason is not None, near_uniform_reason=reason)


def _percent(mean_nll_difference: float) -> float:
    return 100.0 * math.expm1(mean_nll_difference)


def _increase_ci(reference_nll: Sequence[float], candidate_nll: Sequence[float], resamples: int,
                 seed: int) -> tuple[float, float]:
    """Bootstrap the mean of the paired per-sequence NLL differences; exp is monotone, so the interval of the
    perplexity ratio is the transformed interval (the same estimator as the point)."""
    diff = np.asarray(candidate_nll, dtype=np.float64) - np.asarray(reference_nll, dtype=np.float64)
    low, high = mean_ci(diff, resamples=resamples, seed=seed)
    return _percent(low), _percent(high)
