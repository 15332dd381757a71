"""ONNX Runtime decoders: a transformers causal LM exported by ``torch.onnx.export(dynamo=True)`` with its KV cache
as explicit inputs and outputs (``past_key_i``/``past_value_i`` in, ``present_*`` out, the sequence and past lengths
dynamic), run on ONNX Runtime's CPU provider in float32 (``onnx-fp32``) or with every linear, ``lm_head`` included,
as ONNX Runtime's ``MatMulNBits`` (int4 weights, symmetric, block 32: ``onnx-int4``).

    >>> FP32.name, INT4.weights, INT4.promise
    ('onnx-fp32', 'int4', <Promise.QUANTIZED: 'quantized'>)

The session holds the cache as the arrays the last run returned; a prefill starts again from an empty cache
(``[1, kv_heads, 0, head_dim]``).  The file records the longest sequence it was exported for
(``mobilize.max_len`` in its metadata, the model's ``max_position_embeddings``).
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path
from typing import Any

from mobilize.core.decoder import CachedDecoderSession, DecoderVariant, Promise
from mobilize.core.packages import require
from mobilize.core.errors import ConfigError, UnsupportedModelError, headline, \
    translate_errors

FLOAT_PACKAGES = ("onnx", "onnxruntime", "onnxscript", "transformers")
MAX_LEN_KEY = "mobilize.max_len"
"""Metadata key: the longest sequence (prompt and generated) the file was exported for."""
BLOCK = 32
"""MatMulNBits block size (weights per scale along the input features)."""


def export_past_kv(folder: Path, path: Path) -> Path:
    """The saved model as ONNX with the cache as inputs/outputs (dynamo exporter, opset 18); weights in a side file
    only past the 2 GB protobuf limit."""
    import torch

    from mobilize.lowering.decoder import load_hf_decoder, past_kv_example, past_kv_module, past_kv_names
    from mobilize.lowering.onnx_export import native_output

    require(FLOAT_PACKAGES, "the ONNX Runtime decoder")
    what = f"ONNX export of the decoder in {folder}"
    lines: list[str] = []
    with translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what} failed: {headline(exc)[:300]}"):
        model = load_hf_decoder(folder)
        max_len = int(model.config.max_position_embeddings)
        names_in, names_out = past_kv_names(model.config.num_hidden_layers)
        seq = torch.export.Dim("seq", min=1, max=max_len)
        past = torch.export.Dim("past", min=0, max=max_len - 1)
        dynamic = ({1: seq}, tuple({2: past} for _ in names_in[1:]))  # *past is varargs: its specs nest
        with native_output(lines), warnings.catch_warnings(), torch.no_grad():  # the exporter prints its steps
            warnings.simplefilter("ignore")
            program = torch.onnx.export(past_kv_module(model), past_kv_example(model), dynamic_shapes=dynamic,
                                        input_names=names_in, output_names=names_out, dynamo=True,
                                        opset_version=18)
        program.model.metadata_props[MAX_LEN_KEY] = str(max_len)
        path.parent.mkdir(parents=True, exist_ok=True)
        program.save(str(path))
    return path


def quantize_int4(source: Path, path: Path, block: int = BLOCK) -> Path:
    """Every MatMul with constant weights (the linears and ``lm_head``) as ``MatMulNBits``: 4-bit symmetric weights,
    one scale per ``block`` input features (ONNX Runtime's own quantizer, data-free)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    external = source.with_name(source.name + ".data").exists()  # fp32 past 2 GB: keep int4 weights beside too
    what = f"ONNX Runtime int4 (MatMulNBits) quantization of {source.name}"
    quant_log = logging.getLogger("onnxruntime.quantization")
    level = quant_log.level
    quant_log.setLevel(logging.WARNING)  # it logs every node it quantizes at INFO
    try:
        with translate_errors(UnsupportedModelError, what):
            quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), block_size=block, is_symmetric=True, bits=4)
            quantizer.process()
            quantizer.model.save_model_to_file(str(path), use_external_data_format=external)
    finally:
        quant_log.setLevel(level)
    return path


def build_fp32(folder: Path, out_dir: Path) -> Path:
    return export_past_kv(Path(folder), Path(out_dir) / "model-fp32.onnx")


def build_int4(folder: Path, out_dir: Path, group: int = BLOCK) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mobilize-onnx-decoder-") as tmp:  # out_dir holds the int4 file only
        source = export_past_kv(Path(folder), Path(tmp) / "model-fp32.onnx")
        return quantize_int4(source, out / f"model-int4-b{group}.onnx", group)


class OnnxDecoderSession(CachedDecoderSession):
    """A past/present decoder file in an ONNX Runtime CPU session with ``threads`` intra-op threads."""

    def __init__(self, path: Path, threads: int, max_len: int):
        import numpy as np

        from mobilize.backends.onnxruntime.sessions import ort_session, session_options

        require(("onnxruntime",), "the ONNX Runtime decoder")
        self.path = Path(path)
        with translate_errors(UnsupportedModelError, f"ONNX Runtime could not load {self.path}"):
            self.session = ort_session(self.path, session_options(threads))
        inputs = self.session.get_inputs()
        if not inputs or inputs[0].name != "input_ids" or any(len(i.shape) != 4 for i in inputs[1:]):
            names = ", ".join(i.name for i in inputs)
            raise UnsupportedModelError(f"{self.path.name} is no decoder file mobilize built: its inputs are {names} "
                                        f"(expected input_ids, then one 4-D past key/value per layer)",
                                        hint="give an .onnx that mobilize compare or optimize built for a causal LM, or "
                                             "bench it without --task generation")
        built = self.session.get_modelmeta().custom_metadata_map.get(MAX_LEN_KEY)
        if built is not None and max_len > int(built):
            raise ConfigError(f"{self.path.name} was exported for {built} tokens; this run needs {max_len}",
                              hint=f"keep the prompt and the tokens generated under {built}")
        self.max_len = max_len
        self.threads = threads
        self._past_names = [i.name for i in inputs[1:]]
        self._empty = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in inputs[1:]}
        self._past: dict[str, Any] = {}

    def _start(self) -> None:
        self._past = dict(self._empty)

    def _forward(self, ids: list[int], start: int) -> Any:
        import numpy as np

        outs = self.session.run(None, {"input_ids": np.asarray([ids], np.int64), **self._past})
        self._past = dict(zip(self._past_names, outs[1:]))
        return np.asarray(outs[0][0], dtype=np.float32)

    def close(self) -> None:
        self.session, self._past = None, {}


_CACHE = "torch.onnx dynamo export (opset 18), KV cache as past/present inputs and outputs, ONNX Runtime CPU"

FP32 = DecoderVariant(
    name="onnx-fp32", engine="onnxruntime", weights="fp32", promise=Promise.FLOAT,
    build=build_fp32, load=OnnxDecoderSession, packages=FLOAT_PACKAGES,
    how=f"float32, {_CACHE}",
)
INT4 = DecoderVariant(
    name="onnx-int4", engine="onnxruntime", weights="int4", promise=Promise.QUANTIZED,
    build=build_int4, load=OnnxDecoderSession, packages=FLOAT_PACKAGES, groups=(128, 64, 32, 16), groups_pad=True,
    how=f"ONNX Runtime MatMulNBits int4 weights (symmetric, block {BLOCK} (tune: 128 to 16), every linear and lm_head; embeddings "
        f"float32), {_CACHE}",
)
