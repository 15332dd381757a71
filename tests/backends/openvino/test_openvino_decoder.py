"""The OpenVINO decoder variants beyond the contract every decoder meets (tests/contract/test_decoders.py): the
weight types each promises (float32 saved as float32; NNCF int8; int4 with the embedding and lm_head int8), int8
keeping the float model's greedy tokens, and a cache longer than converted refused."""

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
