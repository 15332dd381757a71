"""The ExecuTorch decoder variants beyond the contract every decoder meets (tests/contract/test_decoders.py): 8da4w
is the same torchao-quantized model run eagerly, the program's static cache refuses a longer one, and a thread
pool resize reloads the program."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("executorch")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from mobilize.backends.executorch.decoder import FP32, INT4_8DA4W  # noqa: E402
from tests.decoder_files import MAX_LEN, PROMPT, STEPS, eager, greedy  # noqa: E402


def test_refuses_a_longer_cache_than_built(decoder_file):
    from mobilize.core.errors import ConfigError

    _, path = decoder_file("executorch-fp32")
    with pytest.raises(ConfigError, match="holds 64 tokens"):
        FP32.load(path, 1, 2 * MAX_LEN)


def test_8da4w_matches_torchao_eager(decoder_file, tiny_llama):
    from mobilize.backends.executorch.decoder_export import quantize_8da4w
    from mobilize.lowering.decoder import load_hf_decoder

    _, path = decoder_file("executorch-8da4w")
    assert path.name == "model-8da4w-g32.pte"
    model = load_hf_decoder(tiny_llama)
    assert quantize_8da4w(model) == 32
    session = INT4_8DA4W.load(path, 1, MAX_LEN)
    try:
        first, steps, tokens = greedy(session, PROMPT, STEPS)
        reference = eager(model, PROMPT + tokens[:-1])  # the eager torchao-quantized model
        got = np.concatenate([first, np.stack(steps)])
        assert np.abs(got - reference).max() <= 0.05 * np.abs(reference).max()
        assert tokens == [int(r.argmax()) for r in reference[len(PROMPT) - 1:]]
    finally:
        session.close()


def test_threads_size_the_pool_and_a_resize_reloads(decoder_file):
    from mobilize.backends.executorch.runtime import _size_pool, portable_lib
    from mobilize.core.errors import ConfigError

    _, path = decoder_file("executorch-fp32")
    session = FP32.load(path, 1, MAX_LEN)
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


def test_custom_attention_is_checked_on_the_float_model_and_refuses_a_wrong_one(tiny_llama, tmp_path, monkeypatch):
    """The custom-op attention is checked against the model's own on the float model, before 8da4w (on the quantized
    one, float rounding flips int8 activation codes: a correct attention read 0.076 off on Qwen2.5-0.5B's shape and
    was refused); an attention that computes something else is refused in one line."""
    import torch

    from mobilize.backends.executorch import decoder_export
    from mobilize.core.errors import UnsupportedByEngineError
    from mobilize.lowering.decoder import load_hf_decoder

    seen = []
    real = decoder_export.check_custom_attention

    def spy(model):
        seen.append(any(type(m.weight).__name__ != "Parameter" or m.weight.dtype != torch.float32
                        for m in model.modules() if isinstance(m, torch.nn.Linear)))
        real(model)

    monkeypatch.setattr(decoder_export, "check_custom_attention", spy)
    monkeypatch.setattr(decoder_export, "export_program", lambda module, vocab: b"")  # the check is what is tested
    INT4_8DA4W.build(tiny_llama, tmp_path)
    assert seen == [False], "checked once, on float linears"

    off = decoder_export._custom_sdpa
    monkeypatch.setattr(decoder_export, "_custom_sdpa", lambda *a, **k: (off(*a, **k)[0] * 1.1, None))
    with pytest.raises(UnsupportedByEngineError, match="does not reproduce this model's attention"):
        real(load_hf_decoder(tiny_llama))
