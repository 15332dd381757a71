"""The OpenVINO decoder variants beyond the contract every decoder meets (tests/contract/test_decoders.py): the
weight types each promises (float32 saved as float32; NNCF int8; int4 with the embedding and lm_head int8), int8
keeping the float model's greedy tokens, a cache longer than converted refused, and the stateful form: the cache held
in the plugin's variables with attention fused onto it (what made decode 4-5x faster), a float file's cache kept f32,
and an IR saved in the earlier past/present form still loaded (made stateful) with the same logits."""

from __future__ import annotations

import collections

import numpy as np
import pytest

pytest.importorskip("openvino")
pytest.importorskip("transformers")

from mobilize.backends.openvino.decoder import FP32, INT8  # noqa: E402
from tests.decoder_files import MAX_LEN, PROMPT, eager  # noqa: E402


def _weight_types(xml):
    """Element type -> count of the IR's weight matrices (the smallest is 32 x 64; scales - 64 x 4 at group 16 -,
    zero points and the rotary constants are smaller)."""
    import openvino as ov

    model = ov.Core().read_model(str(xml))  # held while its ops are read (they do not keep it alive)
    return collections.Counter(op.get_element_type().get_type_name() for op in model.get_ordered_ops()
                               if op.get_type_name() == "Constant" and np.prod(op.get_output_shape(0)) >= 32 * 32)


@pytest.mark.parametrize("name, types", [
    ("openvino-fp32", {"f32": 2 + 2 * 7}),  # saved as float32, not OpenVINO's default fp16
    ("openvino-int8", {"u8": 2 + 2 * 7}),
    ("openvino-int4", {"i4": 2 * 7, "u8": 2}),  # the embedding and lm_head stay int8 (NNCF's backup mode)
    ("openvino-int4@g16", {"i4": 2 * 7, "u8": 2}),
])
def test_openvino_weight_types(decoder_file, name, types):
    _, path = decoder_file(name)
    assert path.with_suffix(".bin").exists() and _weight_types(path) == types


def test_openvino_int8_keeps_the_greedy_tokens_and_fp32_its_cache_length(decoder_file, tiny_llama):
    from mobilize.core.errors import ConfigError
    from mobilize.lowering.decoder import load_hf_decoder

    fp32 = eager(load_hf_decoder(tiny_llama), PROMPT)
    _, path = decoder_file("openvino-int8")
    session = INT8.load(path, 1, MAX_LEN)
    try:
        agreement = np.mean(session.prefill(PROMPT).argmax(-1) == fp32.argmax(-1))
        assert agreement >= 0.5  # random weights keep their greedy tokens in int8 (not in int4)
    finally:
        session.close()
    _, path = decoder_file("openvino-fp32")
    assert path.name == "model-fp32.xml"
    with pytest.raises(ConfigError, match="converted for 64 tokens"):
        FP32.load(path, 1, 2 * MAX_LEN)


def _runtime_layers(session):
    return collections.Counter(op.get_rt_info()["layerType"].astype(str)
                               for op in session.compiled.get_runtime_model().get_ops())


def test_openvino_files_are_stateful_with_attention_fused_onto_the_cache(decoder_file, tiny_llama):
    import openvino as ov

    from mobilize.backends.openvino.decoder import INT4

    _, path = decoder_file("openvino-fp32")
    model = ov.Core().read_model(str(path))
    assert sorted(port.get_any_name() for port in model.inputs) == ["beam_idx", "input_ids"]
    assert [port.get_any_name() for port in model.outputs] == ["logits"]
    assert sum(op.get_type_name() == "ReadValue" for op in model.get_ops()) == 2 * 2  # K and V of 2 layers
    session = FP32.load(path, 1, MAX_LEN)
    try:
        layers = _runtime_layers(session)
        # fused: one attention node per layer appending to the plugin's cache (decomposed, it is MatMul + Softmax)
        assert layers["ScaledDotProductAttention"] == 2 and "Softmax" not in layers
        assert session.compiled.get_property("KV_CACHE_PRECISION").get_type_name() == "f32"  # a float file stays float
        assert session.notes == []
    finally:
        session.close()
    _, path = decoder_file("openvino-int4")
    session = INT4.load(path, 1, MAX_LEN)
    try:
        assert any("the CPU plugin's defaults for compressed weights: KV cache" in note for note in session.notes)
    finally:
        session.close()


def test_a_past_present_ir_still_loads_and_matches_the_stateful_file(decoder_file, tiny_llama, tmp_path):
    import openvino as ov

    from mobilize.backends.openvino.decoder import convert_past_kv

    _, path = decoder_file("openvino-fp32")
    old = tmp_path / "old.xml"
    ov.save_model(convert_past_kv(tiny_llama), str(old), compress_to_fp16=False)  # the earlier files' form
    assert any(port.get_any_name() == "past_key_0" for port in ov.Core().read_model(str(old)).inputs)
    logits = []
    for file in (path, old):
        session = FP32.load(file, 1, MAX_LEN)
        try:
            steps = [session.prefill(PROMPT)[-1]]
            steps += [session.decode(int(steps[-1].argmax())) for _ in range(4)]
            logits.append(np.stack(steps))
        finally:
            session.close()
    np.testing.assert_allclose(logits[0], logits[1], atol=1e-4)


def _with_inputs(model, names):
    """``model`` given i64 inputs ``names`` of shape [1, -1] that its logits read (plus 0 times their sum), as
    optimum-intel's IRs take attention_mask and position_ids: a session that does not feed them cannot run it."""
    import openvino as ov
    from openvino import opset13

    logits = model.outputs[0]
    total = logits.get_node().input_value(0)  # the Result's source
    params = []
    for name in names:
        p = opset13.parameter(ov.PartialShape([1, -1]), ov.Type.i64, name=name)
        p.output(0).get_tensor().set_names({name})
        params.append(p)
        zero = opset13.multiply(opset13.convert(opset13.reduce_sum(p, opset13.constant([0, 1])), "f32"),
                                opset13.constant(0.0, dtype=ov.Type.f32))
        total = opset13.add(total, zero)
    logits.get_node().input(0).replace_source_output(total.output(0) if hasattr(total, "output") else total)
    model.add_parameters(params)
    model.validate_nodes_and_infer_types()
    return model


def test_an_optimum_intel_style_ir_is_fed_its_mask_and_positions_and_a_foreign_input_is_refused(
        decoder_file, tiny_llama, tmp_path):
    """optimum-intel's IRs take attention_mask and position_ids beside input_ids and beam_idx: fed (the same logits
    as mobilize's file); an input no decoder session feeds (a vision model's pixel_values) is one line (exit 2's
    UnsupportedModelError), not an internal error."""
    import openvino as ov

    from mobilize.backends.openvino.decoder import convert_past_kv
    from mobilize.core.errors import UnsupportedModelError

    _, path = decoder_file("openvino-fp32")
    optimum = tmp_path / "openvino_model.xml"
    ov.save_model(_with_inputs(convert_past_kv(tiny_llama), ["attention_mask", "position_ids"]), str(optimum),
                  compress_to_fp16=False)
    logits = []
    for file in (path, optimum):
        session = FP32.load(file, 1, MAX_LEN)
        try:
            steps = [session.prefill(PROMPT)[-1]]
            steps += [session.decode(int(steps[-1].argmax())) for _ in range(3)]
            logits.append(np.stack(steps))
        finally:
            session.close()
    np.testing.assert_allclose(logits[0], logits[1], atol=1e-4)

    foreign = tmp_path / "vlm.xml"
    ov.save_model(_with_inputs(convert_past_kv(tiny_llama), ["pixel_values"]), str(foreign), compress_to_fp16=False)
    with pytest.raises(UnsupportedModelError, match="vlm.xml takes pixel_values, which a decoder session does not "
                                                    "feed"):
        FP32.load(foreign, 1, MAX_LEN)
