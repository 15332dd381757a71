"""Prefill/decode timing of an eager causal LM on its KV cache, and the cache's correctness, on a tiny decoder."""

from __future__ import annotations

import pytest
import torch

from mobilize.bench.generation import GenerationBenchConfig, cached_logits, greedy_continuation, time_generation


@pytest.fixture(scope="module")
def lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # logits far from uniform, so greedy choices are not near ties
        model.lm_head.weight.mul_(50.0)
    return model


def test_decode_on_the_cache_equals_a_full_forward(lm):
    ids = torch.randint(0, 96, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        full = lm(input_ids=ids, use_cache=False).logits
    for prompt_len in (1, 7, 19):
        torch.testing.assert_close(cached_logits(lm, ids, prompt_len), full, atol=1e-4, rtol=1e-4)


def test_greedy_continuation_is_the_full_forwards_argmax(lm):
    prompt = torch.arange(5, 13).view(1, 8)
    tokens = greedy_continuation(lm, prompt, 6)
    assert len(tokens) == 6
    with torch.inference_mode():
        full = lm(input_ids=torch.cat([prompt, torch.tensor([tokens])], dim=1), use_cache=False).logits
    assert full[0, 7:13].argmax(-1).tolist() == tokens


def test_timing_counts_and_units(lm):
    threads = torch.get_num_threads()
    prompt = torch.arange(10).view(1, 10)
    t = time_generation(lm, prompt, GenerationBenchConfig(gen_tokens=5, runs=3, warmup=1, threads=1))
    assert torch.get_num_threads() == threads, "the thread count is restored"
    assert (t.prompt_tokens, t.gen_tokens, t.runs) == (10, 5, 3)
    assert len(t.prefill_times_ms) == 3 and len(t.decode_times_ms) == 15
    assert all(x > 0 for x in t.prefill_times_ms + t.decode_times_ms)
    assert t.prefill.iterations == 3 and t.decode.iterations == 15
    assert 0 < t.decode_ms_per_token_p50 <= t.decode_ms_per_token_p90
    assert t.decode_tokens_per_s == pytest.approx(15 / (sum(t.decode_times_ms) / 1e3))
    assert t.token_ids == greedy_continuation(lm, prompt, 5)
    data = t.to_json()
    assert data["decode_tokens_per_s"] > 0 and data["prefill_ms_p50"] > 0 and len(data["token_ids"]) == 5


def test_bad_counts_are_refused(lm):
    with pytest.raises(ValueError, match="at least 1"):
        time_generation(lm, torch.arange(4).view(1, 4), GenerationBenchConfig(gen_tokens=0))
