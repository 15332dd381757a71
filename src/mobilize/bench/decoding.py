"""The one timed loop of a decoder (``compare``, ``bench --task generation`` and ``tune`` all time with it) and
the one greedy continuation (the float reference and every file's check decode with it).

A decoder session (:class:`mobilize.core.decoder.DecoderSession`) runs a **prefill** over the prompt - the time
to the first token - then **decode** steps, one token each on its KV cache.  Every runtime is fed the same ids:
the prompt, then the float model's greedy continuation of it, so every file does the same work whatever its
rounding picks.

    >>> import numpy as np
    >>> class Counter:  # a "model" whose next token is always the last one plus 1
    ...     max_len = 64
    ...     def prefill(self, ids): self.last = ids[-1]; return np.eye(16)[[(t + 1) % 16 for t in ids]]
    ...     def decode(self, token): self.last = token; return np.eye(16)[(token + 1) % 16]
    >>> greedy(Counter(), [3, 4], 3)
    [5, 6, 7]
    >>> prefill_ns, steps_ns = decode_round(Counter(), [3, 4], [5, 6, 7], 2)
    >>> prefill_ns > 0, len(steps_ns)
    (True, 2)
"""

from __future__ import annotations

import time
from typing import Any, Callable, Collection, Sequence

import numpy as np


def greedy(session: Any, prompt: Sequence[int], steps: int) -> list[int]:
    """The ``steps`` most likely next tokens after ``prompt``: a prefill, then one decode step per token."""
    return continue_tokens(session, prompt, steps)


def continue_tokens(session: Any, prompt: Sequence[int], steps: int, pick: Callable[[Any], int] | None = None,
                    stop: Collection[int] = (), on_token: Callable[[int], Any] | None = None) -> list[int]:
    """Up to ``steps`` tokens after ``prompt``, each ``pick``-ed from the logits (the most likely by default: the
    one greedy continuation), ending early after a token in ``stop``; ``on_token`` sees each as it comes."""
    pick = pick or (lambda logits: int(np.argmax(logits)))
    out = [int(pick(np.asarray(first_logits(session, prompt))))]
    if on_token:
        on_token(out[-1])
    while len(out) < steps and out[-1] not in stop:
        out.append(int(pick(session.decode(out[-1]))))
        if on_token:
            on_token(out[-1])
    return out


def first_logits(session: Any, prompt: Sequence[int]) -> Any:
    """The prompt run as an app starts a sequence: the last position's logits only (``DecoderSession.first``; a
    session without it - a test's - gives every position's and the last is taken)."""
    ids = [int(t) for t in prompt]
    first = getattr(session, "first", None)
    return first(ids) if first is not None else np.asarray(session.prefill(ids))[-1]


def ttft_note(session: Any) -> str:
    """What the timed time to first token computes on this file (the engine's ``last_position``)."""
    how = getattr(session, "last_position", "")
    if how:
        return f"TTFT: {how}"
    return ("TTFT: this file computes the output head at every prompt position (it has no last-position output); "
            "the last row is taken")


def decode_round(session: Any, prompt: Sequence[int], decode_ids: Sequence[int], steps: int) -> tuple[int, list[int]]:
    """One timed round: the prefill of ``prompt`` as an app runs it, to the last position's logits (ns, the time to
    the first token), then ``steps`` decode steps fed ``decode_ids`` in order (ns each, the time per token; each
    token's logits computed and left in the engine, ``DecoderSession.step``, as an app's sampler reads them)."""
    prompt = [int(t) for t in prompt]
    t0 = time.perf_counter_ns()
    first_logits(session, prompt)
    prefill_ns = time.perf_counter_ns() - t0
    times = []
    advance = getattr(session, "step", None) or session.decode  # the logits left in the engine, where it can
    for token in list(decode_ids)[:max(1, steps)]:
        t = time.perf_counter_ns()
        advance(int(token))
        times.append(time.perf_counter_ns() - t)
    return prefill_ns, times


def warm_decode(session: Any, prompt: Sequence[int], decode_ids: Sequence[int], runs: int, seconds: float) -> int:
    """Untimed rounds (at least ``runs`` and ``seconds``) before a timed one: after another file's round the
    runtime needs a moment to reach its steady speed.  Returns how many ran."""
    done, start = 0, time.perf_counter()
    while done < runs or time.perf_counter() - start < seconds:
        decode_round(session, prompt, decode_ids, min(4, len(decode_ids)))
        done += 1
    return done


class FullForward:
    """A causal LM run without a cache: each call a full forward over every id so far (a session whose answers
    depend on no cache code; the float reference confirms its tokens the same way:
    :func:`mobilize.generation.model.reference_greedy`)."""

    def __init__(self, lm: Any, max_len: int):
        self.lm, self.max_len, self.ids = lm, max_len, []

    def _logits(self) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.lm(input_ids=torch.tensor([self.ids]), use_cache=False).logits[0].float().numpy()

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        self.ids = [int(t) for t in ids]
        return self._logits()

    def decode(self, token: int) -> np.ndarray:
        self.ids.append(int(token))
        return self._logits()[-1]

    def close(self) -> None:
        self.ids = []
