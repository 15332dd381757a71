"""A quantized decoder file is judged against its tool's own float file too (issue #63 item 5): onnxruntime-genai's
builder, on a Llama with grouped-query attention 8:1 and linear rope scaling, writes an fp32 file 35 dB from the
model (the scaling is not built as transformers computes it) and an int4 file whose perplexity alone could pass;
the int4 file carries the fp32 file's MISMATCH (rule float-sibling) and is not recommended."""

from __future__ import annotations

import json

import pytest

from mobilize.report.json_report import validate

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

VOCAB = 256


@pytest.fixture(scope="module")
def gqa_rope_llama(tmp_path_factory):
    from tests.decoder_files import save_byte_tokenizer

    folder = tmp_path_factory.mktemp("gqa-rope") / "llama"
    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=8, num_key_value_heads=1, max_position_embeddings=128,
                                      vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                      rope_scaling={"rope_type": "linear", "factor": 4.0})
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    save_byte_tokenizer(folder, VOCAB, 2)
    return folder


def test_the_builders_int4_file_is_not_ok_when_its_fp32_sibling_is_mismatch(gqa_rope_llama, run_cli_process,
                                                                            tmp_path):
    from mobilize.generation.plan import generation_variants, unavailable

    if unavailable(generation_variants(["onnx-genai-int4"])[0]):
        pytest.skip("onnxruntime-genai cannot run here")
    out = tmp_path / "o"
    code, stdout, err = run_cli_process("compare", gqa_rope_llama, "--variant", "onnx-genai-fp32", "--variant",
                                        "onnx-genai-int4", "--variant", "onnx-fp32", "--prompt-len", "8",
                                        "--gen-len", "4", "--eval-len", "32", "--rounds", "1", "--time-budget", "1",
                                        "-o", out)
    assert code == 0, err[-2000:]
    report = json.loads((out / "report.json").read_text())
    validate(report)
    got = {v["name"]: v for v in report["variants"]}
    fp32, int4 = got["onnx-genai-fp32"], got["onnx-genai-int4"]
    assert (fp32["outcome"], fp32["verdict"]["rule"]) == ("MISMATCH", "float-sqnr"), fp32["verdict"]
    assert (int4["outcome"], int4["verdict"]["rule"]) == ("MISMATCH", "float-sibling"), int4["verdict"]
    reason = int4["verdict"]["reason"]
    assert "onnx-genai-fp32" in reason and "export error" in reason and "(rule float-sibling)" in reason
    assert int4["verdict"]["numbers"]["sibling"] == "onnx-genai-fp32"
    # the torch.onnx export of the same model is right: the rule names the builder's file, not the model
    assert got["onnx-fp32"]["outcome"] in ("OK", "VACUOUS"), got["onnx-fp32"]["verdict"]
    assert (report["recommended"] or {}).get("name") != "onnx-genai-int4"
    assert "float-sibling" in stdout
