"""The LiteRT decoder variants on a tiny random Llama: float32 against eager transformers (prefill logits at every
length, through padding and windows; cached greedy decode; reset), dynamic int4 against its own full prefill (the
cache) and near the float model; non-Llama models refused in one line."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("litert_torch")
pytest.importorskip("ai_edge_litert")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from mobilize.backends.litert.decoder import FP32, INT4  # noqa: E402

MAX_LEN = 64
VOCAB = 128
PROMPT = [int(t) for t in np.random.default_rng(1).integers(0, VOCAB, 12)]
STEPS = 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=MAX_LEN))
    path = tmp_path_factory.mktemp("tiny-llama-litert")
    model.save_pretrained(path)
    return path


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


def test_litert_fp32_matches_eager_with_cache(folder, tmp_path):
    from mobilize.core.errors import ConfigError
    from mobilize.lowering.decoder import load_hf_decoder

    model = load_hf_decoder(folder)
    path = FP32.build(folder, tmp_path)
    assert path.suffix == ".tflite" and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    assert "tensorflow" not in sys.modules  # the schema alias is gone once litert-torch has imported
    session = FP32.load(path, 1, MAX_LEN)
    try:
        assert session.max_len == MAX_LEN and session.prefill_lens == (8, 32)
        first, steps, tokens = _greedy(session, PROMPT, STEPS)  # 12 tokens: prefill_32, padded
        assert first.shape == (len(PROMPT), VOCAB) and first.dtype == np.float32
        assert _close(first, _eager(model, PROMPT))
        full = _eager(model, PROMPT + tokens[:-1])
        for i, logits in enumerate(steps):  # cache correctness: each step against the full forward
            assert logits.shape == (VOCAB,) and logits.dtype == np.float32
            assert _close(logits, full[len(PROMPT) + i])
        assert tokens == [int(r.argmax()) for r in full[len(PROMPT) - 1:]]
        for n in (1, 8, 32, 45, MAX_LEN - 1):  # exact lengths, padding, overlapping windows of 32
            ids = [int(t) for t in np.random.default_rng(n).integers(0, VOCAB, n)]
            assert _close(session.prefill(ids), _eager(model, ids)), n
        assert np.array_equal(session.prefill(PROMPT), first)  # reset
        with pytest.raises(ConfigError, match="prefill takes 1 to 63"):
            session.prefill(list(range(MAX_LEN)))
    finally:
        session.close()
    with pytest.raises(ConfigError, match="holds 64 tokens"):
        FP32.load(path, 1, 2 * MAX_LEN)


def test_litert_int4_with_cache(folder, tmp_path):
    from mobilize.lowering.decoder import load_hf_decoder

    path = INT4.build(folder, tmp_path)
    assert "q4_block32" in path.name
    fp32 = _eager(load_hf_decoder(folder), PROMPT)
    session = INT4.load(path, 1, MAX_LEN)
    try:
        first, steps, tokens = _greedy(session, PROMPT, STEPS)
        assert first.shape == (len(PROMPT), VOCAB) and first.dtype == np.float32 and np.isfinite(first).all()
        assert all(s.shape == (VOCAB,) and np.isfinite(s).all() for s in steps)
        full = session.prefill(PROMPT + tokens[:-1])  # the same weights without the cache
        assert np.abs(np.stack(steps) - full[len(PROMPT):]).max() <= 0.05 * np.abs(full).max()
        assert np.array_equal(session.prefill(PROMPT), first)
        error = np.abs(first - fp32).max() / np.abs(fp32).max()
        assert 0 < error < 0.5  # quantized, and near the float model
        agreement = np.mean(first.argmax(-1) == fp32.argmax(-1))
        print(f"litert-int4 top-1 agreement with fp32 over the prompt: {agreement:.2f}, max logit error {error:.3f}")
    finally:
        session.close()


def test_litert_decoder_refuses_other_architectures(tmp_path):
    from transformers import GPT2Config, LlamaConfig

    from mobilize.core.errors import UnsupportedModelError

    GPT2Config().save_pretrained(tmp_path / "gpt2")
    with pytest.raises(UnsupportedModelError, match="Llama-architecture models only; this model is GPT2"):
        FP32.build(tmp_path / "gpt2", tmp_path / "out")
    LlamaConfig(max_position_embeddings=131072, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}).save_pretrained(tmp_path / "llama3")
    with pytest.raises(UnsupportedModelError, match="rope_type=llama3"):
        INT4.build(tmp_path / "llama3", tmp_path / "out")
    assert FP32.available() is None and "dynamic_int4_block32" in INT4.how
