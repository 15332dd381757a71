"""The OpenVINO decoder variants on a tiny random Llama: float32 against eager transformers (prefill logits,
cached greedy decode, reset); NNCF int8 and int4 against their own full prefill (the cache), near the float model,
with the weight types the variants promise."""

from __future__ import annotations

import collections

import numpy as np
import pytest

pytest.importorskip("openvino")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from mobilize.backends.openvino.decoder import FP32, INT4, INT8  # noqa: E402

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
    path = tmp_path_factory.mktemp("tiny-llama-openvino")
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


def _weight_types(xml):
    """Element type -> count of the IR's weight matrices (the smallest is 16 x 32; scales, zero points and the
    rotary constants are smaller)."""
    import openvino as ov

    model = ov.Core().read_model(str(xml))  # held while its ops are read (they do not keep it alive)
    return collections.Counter(op.get_element_type().get_type_name() for op in model.get_ordered_ops()
                               if op.get_type_name() == "Constant" and np.prod(op.get_output_shape(0)) >= 16 * 16)


def test_openvino_fp32_matches_eager_with_cache(folder, tmp_path):
    from mobilize.core.errors import ConfigError
    from mobilize.lowering.decoder import load_hf_decoder

    model = load_hf_decoder(folder)
    path = FP32.build(folder, tmp_path)
    assert path.name == "model-fp32.xml" and path.with_suffix(".bin").exists()
    assert _weight_types(path) == {"f32": 2 + 2 * 7}  # saved as float32, not OpenVINO's default fp16
    session = FP32.load(path, 1, MAX_LEN)
    try:
        assert session.max_len == MAX_LEN
        first, steps, tokens = _greedy(session, PROMPT, STEPS)
        assert first.shape == (len(PROMPT), VOCAB) and first.dtype == np.float32
        assert _close(first, _eager(model, PROMPT))
        full = _eager(model, PROMPT + tokens[:-1])
        for i, logits in enumerate(steps):  # cache correctness: each step against the full forward
            assert logits.shape == (VOCAB,) and logits.dtype == np.float32
            assert _close(logits, full[len(PROMPT) + i])
        assert tokens == [int(r.argmax()) for r in full[len(PROMPT) - 1:]]
        assert _close(session.prefill(OTHER), _eager(model, OTHER))  # a longer sequence between, then reset
        assert np.array_equal(session.prefill(PROMPT), first)
        assert session.prefill(list(range(MAX_LEN - 1))).shape == (MAX_LEN - 1, VOCAB)
    finally:
        session.close()
    with pytest.raises(ConfigError, match="converted for 64 tokens"):
        FP32.load(path, 1, 2 * MAX_LEN)


@pytest.mark.parametrize("variant, types, min_agreement", [
    (INT8, {"u8": 2 + 2 * 7}, 0.5),  # random weights keep their greedy tokens in int8 (not in int4)
    (INT4, {"i4": 2 * 7, "u8": 2}, None),  # the embedding and lm_head stay int8 (NNCF's backup mode)
], ids=["int8", "int4"])
def test_openvino_compressed_with_cache(folder, tmp_path, variant, types, min_agreement):
    from mobilize.lowering.decoder import load_hf_decoder

    path = variant.build(folder, tmp_path)
    assert _weight_types(path) == types
    fp32 = _eager(load_hf_decoder(folder), PROMPT)
    session = variant.load(path, 1, MAX_LEN)
    try:
        first, steps, tokens = _greedy(session, PROMPT, STEPS)
        assert first.shape == (len(PROMPT), VOCAB) and first.dtype == np.float32 and np.isfinite(first).all()
        assert all(s.shape == (VOCAB,) and np.isfinite(s).all() for s in steps)
        full = session.prefill(PROMPT + tokens[:-1])  # the same weights without the cache
        assert _close(np.stack(steps), full[len(PROMPT):])
        assert np.array_equal(session.prefill(PROMPT), first)
        error = np.abs(first - fp32).max() / np.abs(fp32).max()
        assert 0 < error < 0.5  # compressed, and near the float model
        agreement = np.mean(first.argmax(-1) == fp32.argmax(-1))
        print(f"{variant.name} top-1 agreement with fp32 over the prompt: {agreement:.2f}, max logit error {error:.3f}")
        if min_agreement is not None:
            assert agreement >= min_agreement
    finally:
        session.close()
