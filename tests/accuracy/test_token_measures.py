"""Token-level measures of a causal LM against its reference: agreement, perplexity increase, near-uniform."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mobilize.accuracy.generation import measure_tokens, score_sequences
from mobilize.accuracy.verify import Policy
from mobilize.core.errors import ConfigError

N, T, V = 24, 16, 50


@pytest.fixture(scope="module")
def data():
    """Token ids and a confident reference: peaked on each true next token, with noise."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, size=(N, T))
    reference = 3.0 * np.eye(V)[np.roll(ids, -1, axis=1)] + rng.normal(size=(N, T, V))
    return ids, reference.astype(np.float32), rng


def test_an_identical_variant(data):
    ids, reference, _ = data
    m = measure_tokens(reference, reference.copy(), ids)
    assert m.top1_agreement == 1.0 and m.ppl_increase_percent == 0.0
    assert m.ppl_increase_percent_low <= 0.0 <= m.ppl_increase_percent_high
    assert m.reference_ppl == m.candidate_ppl and m.tokens == N * (T - 1) and m.sequences == N
    assert not m.near_uniform and m.near_uniform_reason is None


def test_a_perturbed_variant_agrees_less_and_costs_perplexity(data):
    ids, reference, rng = data
    m = measure_tokens(reference, reference + 2.0 * rng.normal(size=reference.shape), ids)
    assert 0.0 < m.top1_agreement < 0.9
    assert m.candidate_ppl > m.reference_ppl
    assert 0.0 < m.ppl_increase_percent_low <= m.ppl_increase_percent <= m.ppl_increase_percent_high
    assert m.ppl_increase_percent == pytest.approx(100 * (m.candidate_ppl / m.reference_ppl - 1), rel=1e-9)


def test_perplexity_is_the_exp_of_the_mean_nll(data):
    ids, reference, _ = data
    logits = torch.from_numpy(reference)
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V).double(), torch.from_numpy(ids[:, 1:]).reshape(-1))
    assert score_sequences(logits, torch.from_numpy(ids)).perplexity == pytest.approx(math.exp(float(nll)), rel=1e-9)


def test_a_list_of_runtime_outputs_reads_like_one_array(data):
    ids, reference, rng = data
    candidate = reference + 0.5 * rng.normal(size=reference.shape).astype(np.float32)
    as_list = [torch.from_numpy(c[None]) for c in candidate]
    assert measure_tokens(reference, as_list, ids) == measure_tokens(reference, candidate, ids)


def test_a_uniform_reference_is_near_uniform(data):
    ids, reference, _ = data
    m = measure_tokens(np.zeros_like(reference), reference, ids)
    assert m.near_uniform and "perplexity" in m.near_uniform_reason and m.reference_ppl == pytest.approx(V)
    assert m.reference_entropy_share == pytest.approx(1.0)


def test_a_random_init_decoder_is_near_uniform():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    lm = LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)).eval()
    ids = torch.randint(0, 256, (4, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        logits = lm(input_ids=ids, use_cache=False).logits
    m = measure_tokens(logits, logits, ids)
    assert m.near_uniform and m.reference_entropy_share > 0.99


def test_the_thresholds_are_the_policys(data):
    ids, reference, _ = data
    sharp = measure_tokens(reference, reference, ids)
    assert not sharp.near_uniform
    strict = Policy(near_uniform_entropy_share=sharp.reference_entropy_share * 0.99)
    m = measure_tokens(reference, reference, ids, policy=strict)
    assert m.near_uniform and "entropy" in m.near_uniform_reason
    assert measure_tokens(reference, reference, ids, policy=Policy(near_uniform_ppl_share=0.0)).near_uniform


def test_mismatched_shapes_are_refused(data):
    ids, reference, _ = data
    with pytest.raises(ConfigError, match="sequence 0"):
        measure_tokens(reference, reference[:, :-1], ids)
    with pytest.raises(ConfigError, match="23 sequences"):
        measure_tokens(reference, reference[:-1], ids)
    with pytest.raises(ConfigError, match="vocabulary"):
        measure_tokens(reference, reference[..., :-1], ids)
