"""The eager decoder variants on a tiny random Llama: float32 against the model's own full forward (prefill logits,
cached greedy decode, reset), int8 weight-only against torchao's quantized model in memory (the saved state dict
round-trips) and near the float model."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from mobilize.backends.eager.decoder import FP32, INT8_WEIGHT_ONLY  # noqa: E402

MAX_LEN = 64
VOCAB = 128
PROMPT = [int(t) for t in np.random.default_rng(1).integers(0, VOCAB, 12)]
OTHER = [int(t) for t in np.random.default_rng(2).integers(0, VOCAB, 30)]
STEPS = 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=MAX_LEN))
    path = tmp_path_factory.mktemp("tiny-llama-eager")
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


def test_eager_fp32_matches_full_forward_with_cache(folder, tmp_path):
    from mobilize.core.errors import ConfigError
    from mobilize.lowering.decoder import load_hf_decoder

    model = load_hf_decoder(folder)
    path = FP32.build(folder, tmp_path)
    assert path.is_dir() and (path / "config.json").is_file()
    session = FP32.load(path, 1, MAX_LEN)
    try:
        assert session.max_len == MAX_LEN and torch.get_num_threads() == 1
        first, steps, tokens = _greedy(session, PROMPT, STEPS)
        assert first.shape == (len(PROMPT), VOCAB) and first.dtype == np.float32
        assert _close(first, _eager(model, PROMPT))
        full = _eager(model, PROMPT + tokens[:-1])
        for i, logits in enumerate(steps):  # cache correctness: each step against the full forward
            assert logits.shape == (VOCAB,) and logits.dtype == np.float32
            assert _close(logits, full[len(PROMPT) + i])
        assert tokens == [int(r.argmax()) for r in full[len(PROMPT) - 1:]]
        assert _close(session.prefill(OTHER), _eager(model, OTHER))  # a longer sequence between, then reset
        assert _close(session.prefill(PROMPT), first)
        assert session.prefill(list(range(MAX_LEN - 1))).shape == (MAX_LEN - 1, VOCAB)
        with pytest.raises(ConfigError, match="prefill takes 1 to 63"):
            session.prefill(list(range(MAX_LEN)))
    finally:
        session.close()


def test_eager_int8wo_round_trips_torchao(folder, tmp_path):
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    from mobilize.lowering.decoder import load_hf_decoder

    path = INT8_WEIGHT_ONLY.build(folder, tmp_path)
    assert (path / "int8wo.pt").is_file() and (path / "config.json").is_file()
    assert (path / "int8wo.pt").stat().st_size < (folder / "model.safetensors").stat().st_size
    fp32 = _eager(load_hf_decoder(folder), PROMPT)
    quantized = load_hf_decoder(folder)
    quantize_(quantized, Int8WeightOnlyConfig())
    session = INT8_WEIGHT_ONLY.load(path, 1, MAX_LEN)
    try:
        assert type(session.model.lm_head.weight).__name__ == "Int8Tensor"
        first, steps, tokens = _greedy(session, PROMPT, STEPS)
        assert first.shape == (len(PROMPT), VOCAB) and first.dtype == np.float32 and np.isfinite(first).all()
        assert all(s.shape == (VOCAB,) and np.isfinite(s).all() for s in steps)
        assert _close(first, _eager(quantized, PROMPT))  # the saved file is torchao's model
        full = _eager(quantized, PROMPT + tokens[:-1])
        assert _close(np.stack(steps), full[len(PROMPT):])
        assert _close(session.prefill(PROMPT), first)
        error = np.abs(first - fp32).max() / np.abs(fp32).max()
        assert 0 < error < 0.5  # quantized, and near the float model
        agreement = np.mean(first.argmax(-1) == fp32.argmax(-1))
        print(f"eager-int8wo top-1 agreement with fp32 over the prompt: {agreement:.2f}, max logit error {error:.3f}")
    finally:
        session.close()


def test_eager_variants_are_available_here():
    assert FP32.available() is None and INT8_WEIGHT_ONLY.available() is None
    assert "torchao" in INT8_WEIGHT_ONLY.packages and "Int8WeightOnlyConfig" in INT8_WEIGHT_ONLY.how
