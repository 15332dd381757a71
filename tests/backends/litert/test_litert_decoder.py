"""The LiteRT decoder variants beyond the contract every decoder meets (tests/contract/test_decoders.py): prefill
at every length through its fixed signatures (exact, padded, overlapping windows), the converter leaves no
tensorflow alias behind, the int4 recipe in the file's name, a longer cache refused, and non-Llama models refused
in one line."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("litert_torch")
pytest.importorskip("ai_edge_litert")
pytest.importorskip("transformers")

from mobilize.backends.litert.decoder import FP32, INT4  # noqa: E402
from tests.decoder_files import MAX_LEN, VOCAB, close, eager  # noqa: E402


def test_litert_fp32_prefills_every_length_through_its_signatures(decoder_file, tiny_llama):
    from mobilize.core.errors import ConfigError
    from mobilize.lowering.decoder import load_hf_decoder

    _, path = decoder_file("litert-fp32")
    assert path.suffix == ".tflite" and sorted(p.name for p in path.parent.iterdir()) == [path.name]
    assert "tensorflow" not in sys.modules  # the schema alias is gone once litert-torch has imported
    model = load_hf_decoder(tiny_llama)
    session = FP32.load(path, 1, MAX_LEN)
    try:
        assert session.prefill_lens == (8, 32)
        for n in (1, 8, 32, 45, MAX_LEN - 1):  # exact lengths, padding, overlapping windows of 32
            ids = [int(t) for t in np.random.default_rng(n).integers(0, VOCAB, n)]
            assert close(session.prefill(ids), eager(model, ids)), n
    finally:
        session.close()
    with pytest.raises(ConfigError, match="holds 64 tokens"):
        FP32.load(path, 1, 2 * MAX_LEN)


def test_litert_keeps_its_cache_in_place(decoder_file):
    """The cache buffers are bound as each call's inputs and outputs: a prefill of n tokens fills positions 0..n-1 of
    the very buffers the session holds, and a decode step writes position n there (no copy of the cache per call)."""
    _, path = decoder_file("litert-fp32")
    session = FP32.load(path, 1, MAX_LEN)
    try:
        [(name, buffer)] = list(session._kv.items())[:1]
        shape = buffer.get_tensor_details()["shape"]  # [1, positions, kv heads, head dim]

        def filled() -> list[bool]:
            cache = buffer.read(int(np.prod(shape)), np.float32).reshape(shape)
            return [bool(np.any(cache[0, p])) for p in range(shape[1])]

        session.prefill(list(range(8)))  # exactly its prefill_8 signature (a shorter prompt writes the padding too)
        assert filled()[:10] == [True] * 8 + [False] * 2, name
        session.decode(9)
        assert filled()[:10] == [True] * 9 + [False], name
        session.prefill(list(range(8)))  # a new sequence starts from an empty cache
        assert filled()[:10] == [True] * 8 + [False] * 2, name
    finally:
        session.close()


def test_litert_int4_names_its_recipe(decoder_file):
    _, path = decoder_file("litert-int4")
    assert "q4_block32" in path.name


def test_litert_decoder_refuses_other_architectures(tmp_path):
    from transformers import GPT2Config, LlamaConfig

    from mobilize.core.errors import UnsupportedByEngineError as UnsupportedModelError  # UNSUPPORTED, not EXPORT_FAIL

    GPT2Config().save_pretrained(tmp_path / "gpt2")
    with pytest.raises(UnsupportedModelError, match=r"converts Llama, Mistral and Qwen2 \(.*\) only; this model is GPT2"):
        FP32.build(tmp_path / "gpt2", tmp_path / "out")
    LlamaConfig(max_position_embeddings=131072, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}).save_pretrained(tmp_path / "llama3")
    with pytest.raises(UnsupportedModelError, match="rope_type=llama3"):
        INT4.build(tmp_path / "llama3", tmp_path / "out")
    assert FP32.available() is None and "dynamic_int4_block32" in INT4.how
