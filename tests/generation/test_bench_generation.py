"""``mobilize bench FILE --task generation`` times a decoder file in tokens, speed_benchmark style."""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_one_line_error

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def decoder_file(tmp_path_factory):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mobilize.core.backend import BACKENDS

    folder = tmp_path_factory.mktemp("lm")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=64)).save_pretrained(folder / "model")
    variant = BACKENDS.get("onnxruntime").entry("decoders", "onnx-fp32")
    return variant.build(folder / "model", folder / "onnx")


def test_a_decoder_file_is_timed_in_tokens(run_cli, decoder_file, tmp_path):
    out = tmp_path / "b.json"
    code, stdout, err = run_cli("bench", decoder_file, "--task", "generation", "--prompt-len", "8", "--gen-len", "6",
                                "--iter", "3", "--warmup", "1", "--threads", "1", "--json", out)
    assert code == 0, err
    assert "Milliseconds to first token:" in stdout and "(8-token prompt, median of 3 runs)" in stdout
    assert "Main run finished. Microseconds per token:" in stdout and "Tokens per second:" in stdout
    report = json.loads(out.read_text())
    assert report["task"] == "generation" and report["decode_tokens_per_s"] > 0 and report["prefill_ms_p50"] > 0
    assert report["decode_us_per_token_p90"] >= report["decode_us_per_token_p50"]


def test_a_file_no_engine_decodes_is_refused(run_cli, artifacts):
    code, _, err = run_cli("bench", artifacts["torchscript"], "--task", "generation")
    assert_one_line_error(code, err, "no engine here runs a torchscript file as a decoder with a KV cache")
