"""OpenVINO decoders: a transformers causal LM converted straight from PyTorch by ``ov.convert_model`` with its KV
cache as explicit inputs and outputs (``past_key_i``/``past_value_i`` in, ``present_*`` out, the sequence and past
lengths dynamic), saved as IR with float32 weights (``openvino-fp32``) or with NNCF's data-free weight compression:
int8 asymmetric per channel (``openvino-int8``) or int4 symmetric group 32 (``openvino-int4``); run on the CPU plugin
compiled for latency with the session's threads and f32 inference precision.

    >>> FP32.name, INT8.weights, INT4.promise
    ('openvino-fp32', 'int8', <Promise.QUANTIZED: 'quantized'>)

Converting from PyTorch rather than from the ONNX file gave a faster decode (0.58 against 1.5-2.5 ms/token on a
tiny Llama, one thread).  The precision is pinned to f32 (also in the IR's ``runtime_options``): on CPUs with AMX or
AVX512-BF16 OpenVINO's default is bf16.  What the plugin really computes in is in the session's ``notes`` when it is
not f32.  The IR records the longest sequence it was converted for (``rt_info/mobilize/max_len``, the model's
``max_position_embeddings``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from mobilize.core.decoder import CachedDecoderSession, DecoderVariant, Promise
from mobilize.core.packages import require
from mobilize.core.errors import ConfigError, UnsupportedModelError, headline, \
    translate_errors

FLOAT_PACKAGES = ("openvino", "transformers")
QUANT_PACKAGES = FLOAT_PACKAGES + ("nncf",)
PRECISION_KEY = ["runtime_options", "INFERENCE_PRECISION_HINT"]
"""The IR's own inference precision (the key the openvino exporter writes and OpenVINO reads when compiling)."""
MAX_LEN_KEY = ["mobilize", "max_len"]
"""rt_info: the longest sequence (prompt and generated) the IR was converted for."""
GROUP = 32
"""int4 group size (weights per scale along the input features)."""


def convert_past_kv(folder: Path) -> Any:
    """The saved model as an ``ov.Model`` with the cache as inputs/outputs (named as :func:`past_kv_names`)."""
    import openvino as ov
    import torch

    from mobilize.lowering.decoder import kv_shape, load_hf_decoder, past_kv_example, past_kv_module, past_kv_names
    from mobilize.lowering.onnx_export import native_output

    what = f"OpenVINO conversion of the decoder in {folder}"
    lines: list[str] = []
    with translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what} failed: {headline(exc)[:300]}"):
        model = load_hf_decoder(folder)
        layers, kv_heads, head_dim = kv_shape(model.config)
        shapes = [([1, -1], ov.Type.i64)] + [([1, kv_heads, -1, head_dim], ov.Type.f32)] * (2 * layers)
        with native_output(lines), warnings.catch_warnings(), torch.no_grad():  # tracer warnings, converter logs
            warnings.simplefilter("ignore")
            converted = ov.convert_model(past_kv_module(model), example_input=past_kv_example(model), input=shapes)
    names_in, names_out = past_kv_names(layers)
    for port, name in [*zip(converted.inputs, names_in), *zip(converted.outputs, names_out)]:
        port.get_tensor().set_names({name})
    converted.set_rt_info(str(int(model.config.max_position_embeddings)), MAX_LEN_KEY)
    converted.set_rt_info("f32", PRECISION_KEY)
    return converted


def compress(model: Any, mode: str, group: int = GROUP) -> Any:
    """NNCF data-free weight compression: ``int8`` (INT8_ASYM, per output channel) or ``int4`` (INT4_SYM, group
    ``group``, every linear it may take: NNCF keeps the embedding and the last linear in int8)."""
    from mobilize.lowering.onnx_export import native_output

    lines: list[str] = []
    what = f"NNCF {mode} weight compression"
    with translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what} failed: {headline(exc)[:300]}"), \
            native_output(lines), warnings.catch_warnings():  # NNCF prints progress bars and INFO lines
        warnings.simplefilter("ignore")
        import nncf

        if mode == "int8":
            return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_SYM, group_size=group, ratio=1.0)


def _build(folder: Path, out_dir: Path, mode: str, group: int = GROUP) -> Path:
    import openvino as ov

    require(QUANT_PACKAGES if mode != "fp32" else FLOAT_PACKAGES, "the OpenVINO decoder")
    model = convert_past_kv(Path(folder))
    if mode != "fp32":
        model = compress(model, mode, group)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    xml = out / f"model-{mode}{f'-g{group}' if mode == 'int4' else ''}.xml"
    ov.save_model(model, str(xml), compress_to_fp16=False)  # the default would store float weights in fp16
    return xml


def build_fp32(folder: Path, out_dir: Path) -> Path:
    return _build(folder, out_dir, "fp32")


def build_int8(folder: Path, out_dir: Path) -> Path:
    return _build(folder, out_dir, "int8")


def build_int4(folder: Path, out_dir: Path, group: int = GROUP) -> Path:
    return _build(folder, out_dir, "int4", group)


class OpenVinoDecoderSession(CachedDecoderSession):
    """A past/present decoder IR compiled on the CPU plugin: one stream, LATENCY hint, ``threads`` threads, f32."""

    def __init__(self, path: Path, threads: int, max_len: int):
        import numpy as np
        import openvino as ov

        require(FLOAT_PACKAGES, "the OpenVINO decoder")
        self.path = Path(path)
        core = ov.Core()
        config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
                  "NUM_STREAMS": 1}
        what = f"OpenVINO could not load {self.path}"
        with translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what}: {headline(exc)[:300]}"):
            model = core.read_model(str(self.path))
            self.compiled = core.compile_model(model, "CPU", config)
        if model.has_rt_info(MAX_LEN_KEY):
            built = int(model.get_rt_info(MAX_LEN_KEY).astype(str))
            if max_len > built:
                raise ConfigError(f"{self.path.name} was converted for {built} tokens, not {max_len}",
                                  hint=f"keep the prompt and the tokens generated under {built}")
        self.max_len = max_len
        self.threads = threads
        self.notes: list[str] = []
        computes_in = self.compiled.get_property("INFERENCE_PRECISION_HINT")
        computes_in = computes_in.get_type_name() if hasattr(computes_in, "get_type_name") else str(computes_in)
        if computes_in not in ("f32", "float32"):
            self.notes.append(f"openvino: asked for f32 inference; the CPU plugin computes in {computes_in}")
        self.request = self.compiled.create_infer_request()
        self._empty = [np.zeros((1, p.get_partial_shape()[1].get_length(), 0, p.get_partial_shape()[3].get_length()),
                                np.float32) for p in self.compiled.inputs[1:]]
        self._past: list[Any] = []

    def _start(self) -> None:
        self._past = list(self._empty)

    def _forward(self, ids: list[int], start: int) -> Any:
        import numpy as np

        results = self.request.infer([np.asarray([ids], np.int64), *self._past])
        outs = [results[port] for port in self.compiled.outputs]
        self._past = [np.array(o) for o in outs[1:]]  # copies: the request reuses its output buffers
        return np.array(outs[0][0], dtype=np.float32)

    def close(self) -> None:
        self.request = self.compiled = None
        self._past = []


_CACHE = "ov.convert_model from PyTorch, KV cache as past/present inputs and outputs, OpenVINO CPU plugin f32"

FP32 = DecoderVariant(
    name="openvino-fp32", engine="openvino", weights="fp32", promise=Promise.FLOAT,
    build=build_fp32, load=OpenVinoDecoderSession, packages=FLOAT_PACKAGES,
    how=f"float32 IR, {_CACHE}",
)
INT8 = DecoderVariant(
    name="openvino-int8", engine="openvino", weights="int8", promise=Promise.QUANTIZED,
    build=build_int8, load=OpenVinoDecoderSession, packages=QUANT_PACKAGES,
    how=f"NNCF compress_weights INT8_ASYM (data-free, per output channel, linears and embeddings), {_CACHE}",
)
INT4 = DecoderVariant(
    name="openvino-int4", engine="openvino", weights="int4", promise=Promise.QUANTIZED,
    build=build_int4, load=OpenVinoDecoderSession, packages=QUANT_PACKAGES, groups=(128, 64, 32, 16),
    how=f"NNCF compress_weights INT4_SYM (data-free, group {GROUP} (tune: 128 to 16), ratio 1.0; embeddings and lm_head int8 "
        f"asymmetric), {_CACHE}",
)
