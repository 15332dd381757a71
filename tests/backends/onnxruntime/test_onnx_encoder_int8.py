"""Issue #48 item 3: static int8 of a BERT-style encoder, as the field quantizes one (ONNX Runtime's dynamic
quantization and optimum's transformer configs: the Linear layers' MatMul/Gemm; NNCF's ModelType.TRANSFORMER:
normalizations, softmax and elementwise ops ignored).  Before, every op ONNX Runtime takes was quantized, and five
notes carried its raw "Axis 1 is out-of-range for weight '...LayerNorm.weight' with rank 1" with no word of what
it meant or which route an encoder has."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.user_models import BERT_TOKENS, TinyBert, sentences

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")


def build(model: nn.Module, tmp_path: Path, **options):
    from mobilize.backends.onnxruntime.exporter import OnnxConfig, OnnxExporter
    from mobilize.core.context import Context
    from mobilize.core.inputs import InputSpec
    from mobilize.sources.data import open_data

    ids, mask = sentences(48, seed=1)
    np.savez(tmp_path / "calibration.npz", input_ids=ids, attention_mask=mask)
    ctx = Context(input_specs=[InputSpec((1, BERT_TOKENS), dtype="int64")] * 2, input_names=["input_ids", "attention_mask"],
                  data=open_data(str(tmp_path / "calibration.npz")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = OnnxExporter(OnnxConfig(quantize="static", **options)).export(model, ctx, tmp_path / "int8")
    return artifact, list(artifact.notes)


def cosines(model: nn.Module, path: Path) -> list[float]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    ids, mask = sentences(24, seed=7)  # held out from calibration
    out = []
    for i in range(len(ids)):
        feed = [ids[i:i + 1], mask[i:i + 1]]
        with torch.no_grad():
            ref = model(*map(torch.from_numpy, feed)).numpy().ravel()
        got = session.run(None, dict(zip(names, feed)))[0].ravel()
        out.append(float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got))))
    return out


def test_an_encoder_is_found_and_quantized_as_the_field_does_within_cosine_0_99(tmp_path):
    import onnx

    model = TinyBert().eval()
    artifact, notes = build(model, tmp_path)
    said = [n for n in notes if "encoder (found from the graph" in n]
    assert said and "12 reading a weight, 4 of two activations" in said[0] and "onnx-dynamic" in said[0], notes
    assert not any("out-of-range" in n for n in notes), notes  # no LayerNorm weight asked per-channel
    graph = onnx.load(str(artifact.path)).graph
    producer = {o: n.op_type for n in graph.node for o in n.output}
    readers = {n.op_type for n in graph.node if n.op_type in ("LayerNormalization", "Softmax")
               and producer.get(n.input[0]) == "DequantizeLinear"}
    assert readers == set(), readers  # LayerNorm and Softmax read float activations
    assert sum(n.op_type == "QuantizeLinear" for n in graph.node) >= 12  # the Linear layers are int8
    cos = cosines(model, artifact.path)
    assert min(cos) >= 0.99, cos


def test_generic_int8_keeps_layernorm_float_and_says_why_in_one_sentence(tmp_path):
    _, notes = build(TinyBert().eval(), tmp_path, model_type="generic")
    said = [n for n in notes if "LayerNormalization node(s) in float" in n]
    assert len(said) == 1 and "rank-1 weight" in said[0] and not any("encoder (" in n for n in notes), notes


def test_the_transformer_scheme_on_a_model_without_linear_layers_says_why_not(tmp_path):
    from mobilize.core.errors import UnsupportedModelError

    convs = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3)).eval()
    src = tmp_path / "convs.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(convs, (torch.rand(1, 3, 16, 16),), str(src), dynamo=False, input_names=["x"])
    from mobilize.backends.onnxruntime import quant

    import onnx

    feed = quant.BatchFeed(onnx.load(str(src)), [[torch.rand(1, 3, 16, 16)] for _ in range(4)])
    with pytest.raises(UnsupportedModelError, match=r"has none \(0 MatMul/Gemm .* 2 Conv"):
        quant.quantize_static_qdq(src, tmp_path / "q.onnx", feed, quant.StaticOptions(model_type="transformer"), 1)


def test_the_layernorm_axis_message_is_one_sentence():
    from mobilize.backends.onnxruntime.messages import explain

    said = explain("Axis 1 is out-of-range for weight 'bert.embeddings.LayerNorm.weight' with rank 1")
    assert said.startswith("per-channel int8 asked for axis 1 of 'bert.embeddings.LayerNorm.weight', a rank-1 "
                           "weight") and said.count(". ") == 0
