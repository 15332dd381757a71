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
        self.layout = _layout(self.path, inputs)
        self._inputs = {i.name for i in inputs}
        built = self.session.get_modelmeta().custom_metadata_map.get(MAX_LEN_KEY)
        if built is not None and max_len > int(built):
            raise ConfigError(f"{self.path.name} was exported for {built} tokens; this run needs {max_len}",
                              hint=f"keep the prompt and the tokens generated under {built}")
        self.max_len = max_len
        self.threads = threads
        past = [i for i in inputs if len(i.shape) == 4]
        self._past_names = [i.name for i in past]
        outputs = [o.name for o in self.session.get_outputs()]
        self._present = [outputs.index(_present_of(n, outputs)) for n in self._past_names]
        self._logits = outputs.index("logits") if "logits" in outputs else 0
        self._empty = {i.name: np.zeros((1, _fixed(i.shape[1]), 0, _fixed(i.shape[3])), _dtype(i.type)) for i in past}
        self._past: dict[str, Any] = {}

    def _start(self) -> None:
        self._past = dict(self._empty)

    def _forward(self, ids: list[int], start: int) -> Any:
        import numpy as np

        feed = {"input_ids": np.asarray([ids], np.int64), **self._past}
        if self.layout == "optimum":  # optimum's decoder: the positions and the mask over every token so far
            feed["attention_mask"] = np.ones((1, start + len(ids)), np.int64)
            if "position_ids" in self._inputs:
                feed["position_ids"] = np.arange(start, start + len(ids), dtype=np.int64)[None]
        outs = self.session.run(None, feed)
        self._past = {n: outs[i] for n, i in zip(self._past_names, self._present)}
        return np.asarray(outs[self._logits][0], dtype=np.float32)

    def close(self) -> None:
        self.session, self._past = None, {}


def _layout(path: Path, inputs: list) -> str:
    """``mobilize`` (input_ids, then one 4-D past per layer) or ``optimum`` (optimum's ONNX decoder export:
    input_ids, attention_mask, optional position_ids, past_key_values.N.key/value); else not a decoder file."""
    names = [i.name for i in inputs]
    past = [i for i in inputs if len(i.shape) == 4]
    if names and names[0] == "input_ids" and past and len(past) == len(names) - 1:
        return "mobilize"
    if "input_ids" in names and "attention_mask" in names and past and all(
            i.name.startswith("past_key_values.") for i in past) and len(past) + 2 + ("position_ids" in names) == len(names):
        return "optimum"
    raise UnsupportedModelError(f"{path.name} is no decoder file: its inputs are {', '.join(names)} (expected "
                                f"input_ids and one 4-D past key/value per layer, as mobilize or optimum export them)",
                                hint="give a decoder .onnx (mobilize compare/optimize, or optimum-cli export onnx), or "
                                     "bench it without --task generation")


def _present_of(past: str, outputs: list[str]) -> str:
    """The output that carries ``past``'s cache forward (optimum: ``past_key_values.3.key`` -> ``present.3.key``;
    mobilize: ``past_key_3`` -> ``present_key_3``)."""
    if past.startswith("past_key_values."):
        name = "present." + past.removeprefix("past_key_values.")
    else:
        name = past.replace("past", "present", 1)
    if name not in outputs:
        raise UnsupportedModelError(f"the decoder file has input {past} but no output {name} to carry its cache")
    return name


def _fixed(dim: Any) -> int:
    """A cache dimension that is symbolic in the file (heads, head size) must be fixed: it is read from the file."""
    if isinstance(dim, int):
        return dim
    raise UnsupportedModelError(f"the decoder file's past key/value has a symbolic heads or head-size dimension "
                                f"({dim}): mobilize cannot size an empty cache for it")


def _dtype(onnx_type: str) -> Any:
    import numpy as np

    return np.float16 if "float16" in onnx_type else np.float32


_CACHE = "torch.onnx dynamo export (opset 18), KV cache as past/present inputs and outputs, ONNX Runtime CPU"

FP32 = DecoderVariant(
    runtime=("onnxruntime",),
    name="onnx-fp32", engine="onnxruntime", weights="fp32", promise=Promise.FLOAT,
    build=build_fp32, load=OnnxDecoderSession, packages=FLOAT_PACKAGES,
    how=f"float32, {_CACHE}",
)
INT4 = DecoderVariant(
    runtime=("onnxruntime",),
    name="onnx-int4", engine="onnxruntime", weights="int4", promise=Promise.QUANTIZED,
    float_sibling="onnx-fp32",
    build=build_int4, load=OnnxDecoderSession, packages=FLOAT_PACKAGES, groups=(128, 64, 32, 16), groups_pad=True,
    how=f"ONNX Runtime MatMulNBits int4 weights (symmetric, block {BLOCK} (tune: 128 to 16), every linear and lm_head; embeddings "
        f"float32), {_CACHE}",
)
