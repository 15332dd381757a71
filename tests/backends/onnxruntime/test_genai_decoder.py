"""The onnxruntime-genai decoder variants beyond the contract every decoder meets (tests/contract/test_decoders.py):
the builder's graph really is ONNX Runtime's generation graph (GroupQueryAttention, MatMulNBits, far fewer nodes than
the torch.onnx export), the mixed file keeps its head in int8 where the default has it in int4, and a model the
builder does not know is refused in one line with its reason."""

from __future__ import annotations

import collections

import pytest

pytest.importorskip("onnxruntime_genai")
pytest.importorskip("transformers")

from mobilize.core.errors import UnsupportedByEngineError  # noqa: E402


def _ops(folder):
    import onnx

    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    return model, collections.Counter(node.op_type for node in model.graph.node)


def _bits(model, node_name_part):
    return {a.i for n in model.graph.node if n.op_type == "MatMulNBits" and node_name_part in n.name
            for a in n.attribute if a.name == "bits"}


@pytest.mark.parametrize("name, head_bits", [("onnx-genai-int4", {4}), ("onnx-genai-int4-mixed", {8})])
def test_the_builder_writes_grouped_query_attention_and_the_named_head_width(decoder_file, name, head_bits):
    _, folder = decoder_file(name)
    model, ops = _ops(folder)
    assert ops["GroupQueryAttention"] == 2 and ops["MatMulNBits"] >= 2 * 4 + 1  # qkv, o, gate/up, down; lm_head
    assert _bits(model, "lm_head") == head_bits
    _, exported = decoder_file("onnx-int4")
    assert sum(ops.values()) < sum(_ops_of_file(exported).values()) / 2  # the generation graph, not the export


def _ops_of_file(path):
    import onnx

    return collections.Counter(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node)


def test_an_architecture_the_builder_does_not_know_is_refused_in_one_line(tmp_path):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from mobilize.backends.onnxruntime.genai import INT4

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=32, n_layer=1, n_head=2, n_positions=64)).save_pretrained(
        tmp_path / "gpt2")
    with pytest.raises(UnsupportedByEngineError, match="onnxruntime-genai's model builder cannot take this model"
                       ) as refused:
        INT4.build_file(tmp_path / "gpt2", tmp_path / "out")
    assert "\n" not in str(refused.value)
