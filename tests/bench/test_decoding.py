"""The one timed decoder loop and the one greedy continuation (mobilize.bench.decoding): the float reference's
cache-free greedy equals the eager decoder session's greedy on its KV cache, and a round times one prefill and
one step per fed token."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mobilize.bench.decoding import FullForward, decode_round, greedy, warm_decode  # noqa: E402


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # logits far from uniform, so greedy choices are not near ties
        model.lm_head.weight.mul_(20)
    return model


def test_the_cache_free_reference_and_a_cached_session_decode_the_same_tokens(lm, tmp_path):
    from mobilize.generation.plan import generation_variants

    lm.save_pretrained(str(tmp_path / "m"))
    [eager] = generation_variants(["eager-fp32"])
    session = eager.load(tmp_path / "m", 1, 32)
    prompt = [1, 5, 9, 2]
    assert greedy(FullForward(lm, 32), prompt, 8) == greedy(session, prompt, 8)


def test_a_round_is_one_prefill_and_one_timed_step_per_token(lm):
    session = FullForward(lm, 32)
    prefill_ns, steps = decode_round(session, [1, 2, 3], [4, 5, 6, 7], 3)
    assert prefill_ns > 0 and len(steps) == 3 and all(t > 0 for t in steps)
    assert session.ids == [1, 2, 3, 4, 5, 6]
    assert warm_decode(session, [1, 2], [3, 4], runs=2, seconds=0.0) == 2
