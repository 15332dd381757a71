"""The ONNX Runtime decoder variants beyond the contract every decoder meets (tests/contract/test_decoders.py):
one file each, every linear of the int4 file a MatMulNBits, the block in its name, and a cache longer than
exported refused."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytest.importorskip("transformers")

from mobilize.backends.onnxruntime.decoder import FP32  # noqa: E402
from tests.decoder_files import MAX_LEN  # noqa: E402


def test_onnx_fp32_is_one_file_for_its_cache(decoder_file):
    from mobilize.core.errors import ConfigError

    _, path = decoder_file("onnx-fp32")
    assert path.name == "model-fp32.onnx" and sorted(p.name for p in path.parent.iterdir()) == [path.name]
    with pytest.raises(ConfigError, match="exported for 64 tokens"):
        FP32.load(path, 1, 2 * MAX_LEN)


@pytest.mark.parametrize("name,block", [("onnx-int4", 32), ("onnx-int4@g16", 16)])
def test_onnx_int4_is_matmulnbits_in_its_block(decoder_file, name, block):
    import onnx

    _, path = decoder_file(name)
    assert path.name == f"model-int4-b{block}.onnx" and sorted(p.name for p in path.parent.iterdir()) == [path.name]
    graph = onnx.load(str(path)).graph
    weights = {i.name for i in graph.initializer}
    nbits = [n for n in graph.node if n.op_type == "MatMulNBits"]
    assert len(nbits) == 2 * 7 + 1  # q k v o gate up down per layer, and lm_head
    assert {a.i for n in nbits for a in n.attribute if a.name == "block_size"} == {block}
    assert not [n for n in graph.node if n.op_type in ("MatMul", "Gemm") and set(n.input) & weights]
