"""Time an eager causal LM the way it runs on a device: a prefill over the prompt, then decode steps on its KV cache.

The model is a transformers causal LM (``model(input_ids=..., cache=..., use_cache=True)`` returning ``.logits``
and ``.cache``, a ``DynamicCache``: transformers 5.24 renamed ``past_key_values`` so; ``zoo:tiny_lm``'s is its
``.lm``).  **Prefill**: time to the first token
for a prompt of P token ids, a fresh cache each run.  **Decode**: each of G steps feeds one token id to the cache
and picks the next token; the ids fed are the greedy continuation computed once before timing, so every run (and
every runtime given the same ids) does the same work whatever its rounding.

    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> _ = torch.manual_seed(0)
    >>> lm = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    ...                                   num_attention_heads=4, num_key_value_heads=2)).eval()
    >>> t = time_generation(lm, torch.arange(8).view(1, 8), GenerationBenchConfig(gen_tokens=4, runs=2, warmup=0))
    >>> t.prompt_tokens, len(t.prefill_times_ms), len(t.decode_times_ms), t.decode_tokens_per_s > 0
    (8, 2, 8, True)
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from mobilize.bench.stats import BenchStats


@dataclasses.dataclass(frozen=True)
class GenerationBenchConfig:
    gen_tokens: int = 32
    """Decode steps timed per run (G)."""
    runs: int = 5
    """Timed runs, each a prefill on a fresh cache and G decode steps."""
    warmup: int = 1
    """Untimed runs before the timed ones, in the same process."""
    threads: int | None = None
    """Intra-op threads for the timed runs (None: leave torch's setting)."""


@dataclasses.dataclass
class GenerationTiming:
    prompt_tokens: int
    gen_tokens: int
    runs: int
    prefill: BenchStats
    """Time to first token over the runs (one prefill each)."""
    decode: BenchStats
    """Time per decoded token over every decode step of every run."""
    decode_tokens_per_s: float
    """Decoded tokens over the total time of their steps."""
    prefill_times_ms: list[float]
    decode_times_ms: list[float]
    token_ids: list[int]
    """The ids fed to the decode steps (the greedy continuation of the prompt, the first from the prefill)."""

    @property
    def prefill_ms_p50(self) -> float:
        return self.prefill.latency_ms_p50

    @property
    def decode_ms_per_token_p50(self) -> float:
        return self.decode.latency_ms_p50

    @property
    def decode_ms_per_token_p90(self) -> float:
        return self.decode.latency_ms_p90

    def to_json(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "gen_tokens": self.gen_tokens, "runs": self.runs,
                "prefill_ms_p50": self.prefill_ms_p50, "prefill_ms_p90": self.prefill.latency_ms_p90,
                "decode_ms_per_token_p50": self.decode_ms_per_token_p50,
                "decode_ms_per_token_p90": self.decode_ms_per_token_p90,
                "decode_tokens_per_s": self.decode_tokens_per_s,
                "prefill": self.prefill.to_json(), "decode": self.decode.to_json(), "token_ids": self.token_ids}


def _step(model, input_ids, cache):
    """One forward on the cache: the next token's logits (1, V) and the cache to use next."""
    out = model(input_ids=input_ids, cache=cache, use_cache=True)
    return out.logits[:, -1], out.cache


def greedy_continuation(model, prompt_ids, n_tokens: int) -> list[int]:
    """The ``n_tokens`` most-likely next tokens after ``prompt_ids`` ((1, P) int64), decoded on the KV cache."""
    import torch

    tokens: list[int] = []
    with torch.inference_mode():
        logits, cache = _step(model, prompt_ids, None)
        for _ in range(n_tokens):
            tokens.append(int(logits.argmax(-1)))
            if len(tokens) < n_tokens:
                logits, cache = _step(model, torch.tensor([[tokens[-1]]], dtype=prompt_ids.dtype), cache)
    return tokens


def cached_logits(model, ids, prompt_len: int):
    """The logits (1, L, V) of every position of ``ids`` ((1, L)), computed the way generation does: a prefill
    over the first ``prompt_len`` ids, then one cached decode step per remaining id.  Equal to one full forward
    over ``ids`` up to rounding when the cache is right."""
    import torch

    with torch.inference_mode():
        out = model(input_ids=ids[:, :prompt_len], use_cache=True)
        rows, cache = [out.logits], out.cache
        for i in range(prompt_len, ids.shape[1]):
            logits, cache = _step(model, ids[:, i:i + 1], cache)
            rows.append(logits[:, None])
    return torch.cat(rows, dim=1)


def time_generation(model, prompt_ids, config: GenerationBenchConfig = GenerationBenchConfig()) -> GenerationTiming:
    """Prefill and decode times of ``model`` for the prompt ``prompt_ids`` ((1, P) int64), ``config.runs`` times."""
    import torch

    if config.gen_tokens < 1 or config.runs < 1:
        raise ValueError(f"gen_tokens and runs must be at least 1, got {config.gen_tokens} and {config.runs}")
    previous_threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        tokens = greedy_continuation(model, prompt_ids, config.gen_tokens)
        feed = [torch.tensor([[t]], dtype=prompt_ids.dtype) for t in tokens]
        prefill_ns: list[int] = []
        decode_ns: list[int] = []
        with torch.inference_mode():
            for run in range(config.warmup + config.runs):
                prefill, decode = _one_run(model, prompt_ids, feed)
                if run >= config.warmup:
                    prefill_ns.append(prefill)
                    decode_ns += decode
    finally:
        torch.set_num_threads(previous_threads)
    return GenerationTiming(
        prompt_tokens=int(prompt_ids.shape[1]), gen_tokens=config.gen_tokens, runs=config.runs,
        prefill=BenchStats.from_times_ns(prefill_ns, sum(prefill_ns)),
        decode=BenchStats.from_times_ns(decode_ns, sum(decode_ns)),
        decode_tokens_per_s=len(decode_ns) / (sum(decode_ns) / 1e9),
        prefill_times_ms=[t / 1e6 for t in prefill_ns], decode_times_ms=[t / 1e6 for t in decode_ns],
        token_ids=tokens)


def _one_run(model, prompt_ids, feed) -> tuple[int, list[int]]:
    """One prefill on a fresh cache and one decode step per fed id: their times in ns."""
    start = time.perf_counter_ns()
    logits, cache = _step(model, prompt_ids, None)
    int(logits.argmax(-1))
    prefill = time.perf_counter_ns() - start
    decode = []
    for ids in feed:
        start = time.perf_counter_ns()
        logits, cache = _step(model, ids, cache)
        int(logits.argmax(-1))
        decode.append(time.perf_counter_ns() - start)
    return prefill, decode
