"""The ExecuTorch decoder variants on a tiny random Llama: float32 against eager transformers (prefill logits,
cached greedy decode, reset), 8da4w against the same torchao-quantized model run eagerly."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("executorch")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from mobilize.backends.executorch.decoder import FP32, INT4_8DA4W  # noqa: E402

MAX_LEN = 64
PROMPT = [int(t) for t in np.random.default_rng(1).integers(0, 128, 12)]
OTHER = [int(t) for t in np.random.default_rng(2).integers(0, 128, 30)]
STEPS = 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=MAX_LEN))
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def fp32_pte(folder, tmp_path_factory):
    return FP32.build(folder, tmp_path_factory.mktemp("executorch-fp32"))


def _eager(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].numpy()


def _greedy(session, prompt, steps):
    """(prefill logits, each decode step's logits, greedy tokens)."""
    first = session.prefill(prompt)
    tokens, steps_logits = [int(first[-1].argmax())], []
    for _ in range(steps):
        logits = session.decode(tokens[-1])
        steps_logits.append(logits)
        tokens.append(int(logits.argmax()))
    return first, steps_logits, tokens


def _close(got, want):
    return np.abs(got - want).max() <= 1e-4 * np.abs(want).max() + 1e-6


def test_fp32_matches_eager_with_cache(folder, fp32_pte):
    from mobilize.lowering.decoder import load_hf_decoder

    model = load_hf_decoder(folder)
    session = FP32.load(fp32_pte, 1, MAX_LEN)
    try:
        assert session.max_len == MAX_LEN
        first, steps, tokens = _greedy(session, PROMPT, STEPS)
        assert first.shape == (len(PROMPT), 128) and first.dtype == np.float32
        assert _close(first, _eager(model, PROMPT))
        full = _eager(model, PROMPT + tokens[:-1])
        for i, logits in enumerate(steps):  # cache correctness: each step against the full forward
            assert logits.shape == (128,)
            assert _close(logits, full[len(PROMPT) + i])
        assert tokens == [int(r.argmax()) for r in full[len(PROMPT) - 1:]]
        assert _close(session.prefill(OTHER), _eager(model, OTHER))  # a longer sequence between, then reset
        assert np.array_equal(session.prefill(PROMPT), first)
        assert session.prefill(list(range(MAX_LEN - 1))).shape == (MAX_LEN - 1, 128)
    finally:
        session.close()


def test_refuses_a_longer_cache_than_built(fp32_pte):
    from mobilize.core.errors import ConfigError

    with pytest.raises(ConfigError, match="holds 64 tokens"):
        FP32.load(fp32_pte, 1, 2 * MAX_LEN)


def test_8da4w_matches_torchao_eager(folder, tmp_path):
    from mobilize.backends.executorch.decoder_export import quantize_8da4w
    from mobilize.lowering.decoder import load_hf_decoder

    path = INT4_8DA4W.build(folder, tmp_path)
    assert path.name == "model-8da4w-g32.pte"
    model = load_hf_decoder(folder)
    fp32 = _eager(model, PROMPT)
    assert quantize_8da4w(model) == 32
    session = INT4_8DA4W.load(path, 1, MAX_LEN)
    try:
        first, steps, tokens = _greedy(session, PROMPT, STEPS)
        assert first.shape == (len(PROMPT), 128) and np.isfinite(first).all()
        assert all(s.shape == (128,) and np.isfinite(s).all() for s in steps)
        reference = _eager(model, PROMPT + tokens[:-1])  # the eager torchao-quantized model
        got = np.concatenate([first, np.stack(steps)])
        assert np.abs(got - reference).max() <= 0.05 * np.abs(reference).max()
        assert tokens == [int(r.argmax()) for r in reference[len(PROMPT) - 1:]]
        agreement = np.mean(first.argmax(-1) == fp32.argmax(-1))
        print(f"8da4w top-1 agreement with fp32 over the prompt: {agreement:.2f}")
    finally:
        session.close()


def test_threads_size_the_pool_and_a_resize_reloads(fp32_pte):
    from mobilize.backends.executorch.runtime import _size_pool, portable_lib
    from mobilize.core.errors import ConfigError

    session = FP32.load(fp32_pte, 1, MAX_LEN)
    try:
        assert portable_lib()._threadpool_get_thread_count() == 1
        first = session.prefill(PROMPT)
        _size_pool(2)  # reloads the program onto the new pool: the cache is gone, so decode must refuse
        with pytest.raises(ConfigError, match="prefill first"):
            session.decode(1)
        assert np.array_equal(session.prefill(PROMPT), first)
    finally:
        session.close()
        _size_pool(1)
