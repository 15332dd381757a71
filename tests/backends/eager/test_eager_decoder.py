"""The eager decoder variants beyond the contract every decoder meets (tests/contract/test_decoders.py): the int8
weight-only file is torchao's quantized model (its saved state dict round-trips), and the float one runs on the
threads it was given."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from mobilize.backends.eager.decoder import FP32, INT8_WEIGHT_ONLY  # noqa: E402
from tests.decoder_files import MAX_LEN, PROMPT, STEPS, close, eager, greedy  # noqa: E402


def test_eager_fp32_is_the_saved_folder_on_the_threads_given(decoder_file):
    _, path = decoder_file("eager-fp32")
    assert path.is_dir() and (path / "config.json").is_file()
    session = FP32.load(path, 1, MAX_LEN)
    try:
        assert torch.get_num_threads() == 1
    finally:
        session.close()


def test_eager_int8wo_round_trips_torchao(decoder_file, tiny_llama):
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    from mobilize.lowering.decoder import load_hf_decoder

    _, path = decoder_file("eager-int8wo")
    assert (path / "int8wo.pt").is_file() and (path / "config.json").is_file()
    assert (path / "int8wo.pt").stat().st_size < (tiny_llama / "model.safetensors").stat().st_size
    quantized = load_hf_decoder(tiny_llama)
    quantize_(quantized, Int8WeightOnlyConfig())
    session = INT8_WEIGHT_ONLY.load(path, 1, MAX_LEN)
    try:
        assert type(session.model.lm_head.weight).__name__ == "Int8Tensor"
        first, steps, tokens = greedy(session, PROMPT, STEPS)
        assert close(first, eager(quantized, PROMPT))  # the saved file is torchao's model
        full = eager(quantized, PROMPT + tokens[:-1])
        assert close(np.stack(steps), full[len(PROMPT):])
    finally:
        session.close()


def test_eager_variants_are_available_here():
    assert FP32.available() is None and INT8_WEIGHT_ONLY.available() is None
    assert "torchao" in INT8_WEIGHT_ONLY.packages and "Int8WeightOnlyConfig" in INT8_WEIGHT_ONLY.how
