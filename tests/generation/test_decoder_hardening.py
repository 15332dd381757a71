"""Every decoder path checks its file and its lengths before any work (#46 item 2-3, #47 items 1-3): a file that
is not a decoder, or random bytes, is one line and exit 2 (never an abort or an internal error); a prompt past the
model's context is refused in seconds, naming the flag and the limit."""

from __future__ import annotations

import time

import pytest

from tests.conftest import assert_one_line_error

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def classifier_files(tmp_path_factory):
    """A classifier's .pte and .onnx, as optimize writes them."""
    from mobilize.cli.main import main

    out = tmp_path_factory.mktemp("cls")
    for recipe in ("executorch-fp32", "onnx-fp32"):
        assert main(["optimize", "zoo:conv_bn_relu", "--recipe", recipe, "-o", str(out / recipe)]) == 0
    return sorted(out.rglob("*.pte")) + sorted(out.rglob("*.onnx"))


def test_random_bytes_named_pte_are_one_line_not_an_abort(run_cli_process, tmp_path):
    garbage = tmp_path / "model.pte"
    garbage.write_bytes(bytes(range(256)) * 16)
    code, out, err = run_cli_process("bench", garbage, "--task", "generation")
    assert_one_line_error(code, err, "could not load")


def test_a_classifier_file_is_no_decoder(run_cli_process, classifier_files):
    assert len(classifier_files) == 2
    for path in classifier_files:
        code, out, err = run_cli_process("bench", path, "--task", "generation")
        assert_one_line_error(code, err, "is no decoder file")


@pytest.mark.parametrize("command", ["compare", "bench"])
def test_a_length_past_any_context_is_refused_at_once(run_cli_process, tmp_path, command):
    t0 = time.monotonic()
    code, out, err = run_cli_process(command, "zoo:tiny_lm", "--task", "generation", "--prompt-len", "100000",
                                     *(["-o", tmp_path / "o"] if command == "compare" else []))
    assert_one_line_error(code, err, "--prompt-len 100000")
    assert time.monotonic() - t0 < 10


def test_a_prompt_past_the_models_context_is_refused_before_any_build(run_cli_process, tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=256)).save_pretrained(tmp_path / "lm")
    t0 = time.monotonic()
    code, out, err = run_cli_process("compare", tmp_path / "lm", "--task", "generation", "--prompt-len", "300",
                                     "-o", tmp_path / "o")
    assert code == 2 and "--prompt-len 300" in err and "context of 256 tokens" in err, err[-2000:]
    assert "Traceback" not in err and time.monotonic() - t0 < 30  # the float reference refuses it as it loads
    assert not (tmp_path / "o" / "artifacts").exists() or not any((tmp_path / "o" / "artifacts").iterdir())
    code, out, err = run_cli_process("bench", tmp_path / "lm", "--task", "generation", "--prompt-len", "300")
    assert_one_line_error(code, err, "--prompt-len 300", "256")
