"""OpenVINO decoders: a transformers causal LM converted straight from PyTorch by ``ov.convert_model`` with its KV
cache as explicit inputs and outputs, then made **stateful** the way optimum-intel's exporter does it (a ``beam_idx``
input gathering each cache, OpenVINO's MakeStateful transformation turning each past/present pair into a
ReadValue/Assign variable, each variable starting empty), saved as IR with float32 weights (``openvino-fp32``) or with
NNCF's data-free weight compression: int8 asymmetric per channel (``openvino-int8``) or int4 symmetric group 32
(``openvino-int4``); run on the CPU plugin compiled for latency with the session's threads and f32 inference precision.

    >>> FP32.name, INT8.weights, INT4.promise
    ('openvino-fp32', 'int8', <Promise.QUANTIZED: 'quantized'>)

Why stateful: with the cache as inputs and outputs every decode step changed the shapes of the whole graph, so the CPU
plugin re-ran shape inference and kernel preparation each call (3.7 ms wall for 1.6 ms of kernels on zoo:tiny_lm) and
decomposed attention into MatMul/Softmax over a copied cache.  A stateful IR whose caches are read through
``beam_idx``'s Gather is the pattern the CPU plugin's StatefulSDPAFusion matches: attention becomes one
ScaledDotProductAttentionWithKVCache node appending to a cache the plugin owns, and only the new token's shape
changes (zoo:tiny_lm int4, one thread: 2.3-2.9 -> 0.55-0.6 ms/token).  An IR saved with the cache as inputs and outputs
(this module's earlier files) is made stateful when loaded.

Precision: the float variant pins f32 everywhere (inference, KV cache, no dynamic activation quantization: on CPUs with
AMX or AVX512-BF16 OpenVINO's default is bf16, and its KV cache default is u8).  The compressed variants keep the CPU
plugin's own defaults for compressed weights - what OpenVINO GenAI runs - and the session's ``notes`` say what they are
on this CPU (here: a u8 KV cache, activations quantized to int8 in groups of 32 on the fly).  The IR records the
longest sequence it was converted for (``rt_info/mobilize/max_len``, the model's ``max_position_embeddings``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from mobilize.backends.openvino.complete import check_ir
from mobilize.core.decoder import CachedDecoderSession, DecoderVariant, Promise
from mobilize.core.packages import require
from mobilize.core.peers import OPTIMUM_INTEL
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


def make_stateful(model: Any) -> Any:
    """The past/present IR with its caches hidden as variables (in place; returned): optimum-intel's recipe
    (``fuse_cache_reorder``, ``make_stateful``, ``build_state_initializer`` in optimum/exporters/openvino/stateful.py),
    written here because optimum-intel pins another transformers and is not a dependency.  Inputs become
    ``input_ids`` and ``beam_idx`` ([0] for one sequence); the output is ``logits``."""
    import numpy as np
    import openvino as ov
    from openvino import opset13
    from openvino._offline_transformations import apply_make_stateful_transformation

    pasts = [port for port in model.inputs if port.get_any_name().startswith("past_")]
    presents = [port for port in model.outputs if port.get_any_name().startswith("present_")]
    beam = opset13.parameter(name="beam_idx", dtype=ov.Type.i32, shape=ov.PartialShape([1]))
    beam.output(0).get_tensor().set_names({"beam_idx"})
    model.add_parameters([beam])
    for port in pasts:  # the Gather is what the CPU plugin's fusion pattern starts from
        consumers = port.get_target_inputs()
        gather = opset13.gather(port, beam, opset13.constant(0))
        for consumer in consumers:
            consumer.replace_source_output(gather.output(0))
    model.validate_nodes_and_infer_types()
    apply_make_stateful_transformation(model, {p.get_any_name(): o.get_any_name() for p, o in zip(pasts, presents)})
    for op in model.get_ops():  # each variable starts as an empty cache (batch 1, 0 positions)
        if op.get_type_name() == "ReadValue":
            dims = [dim.get_min_length() for dim in op.get_output_partial_shape(0)]
            op.set_arguments([opset13.broadcast(opset13.constant(0.0, dtype=op.get_output_element_type(0)),
                                                opset13.constant(np.array(dims, np.int64)))])
    model.validate_nodes_and_infer_types()
    return model


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
    make_stateful(model)
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


def build_optimum_int4(folder: Path, out_dir: Path) -> Path:
    """``optimum-cli export openvino --task text-generation-with-past --weight-format int4`` (its own venv:
    :mod:`mobilize.core.peers`), its defaults otherwise (int4 asymmetric, group 128) but for its own
    ``--group-size-fallback adjust``: a linear whose in-features 128 does not divide (zoo:tiny_lm's 704) gets the
    largest group that does, where its default stops the export; its stateful IR takes ``attention_mask`` and
    ``position_ids`` beside the ids, which :class:`OpenVinoDecoderSession` feeds."""
    return OPTIMUM_INTEL.export(["openvino", "--model", str(Path(folder).resolve()), "--task",
                                 "text-generation-with-past", "--weight-format", "int4", "--group-size-fallback",
                                 "adjust"], Path(out_dir), "openvino_model.xml")


def _compressed(model: Any) -> bool:
    """Whether the IR's weights are stored compressed (integer constants of at least 32 x 32 elements)."""
    import numpy as np

    return any(op.get_type_name() == "Constant" and op.get_element_type().get_type_name() in ("i4", "u4", "i8", "u8", "nf4")
               and np.prod(op.get_output_shape(0)) >= 32 * 32 for op in model.get_ops())


FED_INPUTS = ("input_ids", "beam_idx", "attention_mask", "position_ids")
"""What the session feeds: the ids, the beam index of a stateful IR, and the mask and positions optimum-intel's IRs
also take (``past_*`` inputs of a past/present IR become state when it loads)."""


def _check_inputs(path: Path, names: set[str]) -> None:
    """Refuse, in one line, an IR whose inputs the session cannot feed (a vision-language model's pixel values, an
    encoder-decoder's encoder states, a cache without the ``past_`` names)."""
    other = sorted(n for n in names if n not in FED_INPUTS and not n.startswith("past_"))
    if "input_ids" not in names or other:
        what = f"takes {', '.join(other)}" if other else "has no input_ids input"
        raise UnsupportedModelError(
            f"{path.name} {what}, which a decoder session does not feed (it feeds {', '.join(FED_INPUTS)}, and "
            f"a past/present cache named past_*)",
            hint="give a causal LM's IR: one mobilize built, or optimum-cli export openvino --task text-generation-with-past")


HEAD_FROM = "mobilize_head_from"
"""The input :func:`slice_before_head` adds: the first position the output head computes (0: every one)."""
_THROUGH = {"Convert", "Add", "Multiply", "Divide", "Tanh", "Reshape"}
"""What may sit between the head's MatMul and the logits (a bias, a soft-cap, a precision change)."""


def slice_before_head(model: Any) -> bool:
    """Give the head's input a Slice along the positions from a new input (:data:`HEAD_FROM`), so a prefill can
    compute the head at its last position only - what OpenVINO GenAI's LLMPipeline does to every decoder it compiles
    (its slice-before-MatMul transformation, fixed to the last position) - while perplexity still asks for every
    position (0).  In the session's compiled model only: the file on disk is unchanged.  False (nothing changed)
    where the logits do not come from a MatMul over [batch, positions, hidden]."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    node = model.outputs[0].get_node().input_value(0).get_node()
    for _ in range(6):
        if node.get_type_name() == "MatMul" or node.get_type_name() not in _THROUGH:
            break
        node = node.input_value(0).get_node()
    if node.get_type_name() != "MatMul" or node.input_value(0).get_partial_shape().rank.get_length() != 3:
        return False
    start = ops.parameter([1], ov.Type.i64, name=HEAD_FROM)
    start.output(0).get_tensor().set_names({HEAD_FROM})
    hidden = node.input_value(0)
    sliced = ops.slice(hidden, start, np.asarray([np.iinfo(np.int64).max], np.int64), np.asarray([1], np.int64),
                       np.asarray([1], np.int64))
    node.input(0).replace_source_output(sliced.output(0))
    model.add_parameters([start])
    model.validate_nodes_and_infer_types()
    return True


def _property(compiled: Any, key: str) -> str:
    value = compiled.get_property(key)
    return value.get_type_name() if hasattr(value, "get_type_name") else str(value)


class OpenVinoDecoderSession(CachedDecoderSession):
    """A stateful decoder IR compiled on the CPU plugin: one stream, LATENCY hint, ``threads`` threads, f32 compute; the
    cache lives in the request's variables (emptied by ``reset_state`` at each prefill)."""

    def __init__(self, path: Path, threads: int, max_len: int):
        import numpy as np
        import openvino as ov

        require(FLOAT_PACKAGES, "the OpenVINO decoder")
        self.path = Path(path)
        core = ov.Core()
        config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
                  "NUM_STREAMS": 1}
        what = f"OpenVINO could not load {self.path}"
        check_ir(self.path)  # a short .bin: OpenVINO's reader names no reason
        with translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what}: {headline(exc)[:300]}"):
            model = core.read_model(str(self.path))
        names = {port.get_any_name() for port in model.inputs}
        _check_inputs(self.path, names)
        self._fed = names
        with translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what}: {headline(exc)[:300]}"):
            if "beam_idx" not in names:  # a past/present IR (saved before the files were made stateful)
                make_stateful(model)
            compressed = _compressed(model)
            self._sliced = slice_before_head(model)
            if not compressed:  # a float file stays float: the plugin's default KV cache is u8
                config.update({"KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0})
            self.compiled = core.compile_model(model, "CPU", config)
        if model.has_rt_info(MAX_LEN_KEY):
            built = int(model.get_rt_info(MAX_LEN_KEY).astype(str))
            if max_len > built:
                raise ConfigError(f"{self.path.name} was converted for {built} tokens, not {max_len}",
                                  hint=f"keep the prompt and the tokens generated under {built}")
        self.max_len = max_len
        self.threads = threads
        self.notes: list[str] = []
        computes_in = _property(self.compiled, "INFERENCE_PRECISION_HINT")
        if computes_in not in ("f32", "float32"):
            self.notes.append(f"openvino: asked for f32 inference; the CPU plugin computes in {computes_in}")
        if compressed:
            kv, group = _property(self.compiled, "KV_CACHE_PRECISION"), _property(self.compiled, "DYNAMIC_QUANTIZATION_GROUP_SIZE")
            self.notes.append(
                f"openvino: the CPU plugin's defaults for compressed weights: KV cache {kv}, "
                + (f"activations quantized to int8 on the fly in groups of {group}" if group not in ("0", "") else
                   "activations kept float"))
        self.request = self.compiled.create_infer_request()
        self._beam = np.zeros(1, np.int32)
        if not self._sliced:
            self.last_position = ""

    last_position = ("the output head at the last prompt position only (a Slice before its MatMul, as OpenVINO GenAI "
                     "compiles a decoder; its start an input here, 0 for perplexity's every position)")

    def _start(self) -> None:
        self.request.reset_state()

    def _forward(self, ids: list[int], start: int, keep_from: int = 0) -> Any:
        import numpy as np

        feed = {"input_ids": np.asarray([ids], np.int64), "beam_idx": self._beam}
        if self._sliced:
            feed[HEAD_FROM] = np.asarray([keep_from], np.int64)
        if "attention_mask" in self._fed:  # optimum-intel's IRs: every position so far attended
            feed["attention_mask"] = np.ones((1, start + len(ids)), np.int64)
        if "position_ids" in self._fed:
            feed["position_ids"] = np.arange(start, start + len(ids), dtype=np.int64)[None]
        results = self.request.infer(feed)
        return np.array(results[self.compiled.outputs[0]][0], dtype=np.float32)  # a copy: the request reuses it

    def _forward_last(self, ids: list[int], start: int) -> Any:
        return self._forward(ids, start, keep_from=len(ids) - 1)[-1]

    def close(self) -> None:
        self.request = self.compiled = None


_CACHE = ("ov.convert_model from PyTorch, made stateful (KV cache in the plugin's variables, attention fused with it), "
          "OpenVINO CPU plugin f32")
_DEFAULTS = "KV cache and activation precision as the CPU plugin's defaults for compressed weights (said in the notes)"

FP32 = DecoderVariant(
    runtime=("openvino",),
    name="openvino-fp32", engine="openvino", weights="fp32", promise=Promise.FLOAT,
    build=build_fp32, load=OpenVinoDecoderSession, packages=FLOAT_PACKAGES,
    how=f"float32 IR, {_CACHE}",
)
INT8 = DecoderVariant(
    runtime=("openvino",),
    name="openvino-int8", engine="openvino", weights="int8", promise=Promise.QUANTIZED,
    float_sibling="openvino-fp32",
    build=build_int8, load=OpenVinoDecoderSession, packages=QUANT_PACKAGES,
    how=f"NNCF compress_weights INT8_ASYM (data-free, per output channel, linears and embeddings), {_CACHE}; {_DEFAULTS}",
)
INT4 = DecoderVariant(
    runtime=("openvino",),
    name="openvino-int4", engine="openvino", weights="int4", promise=Promise.QUANTIZED,
    float_sibling="openvino-fp32",
    build=build_int4, load=OpenVinoDecoderSession, packages=QUANT_PACKAGES, groups=(128, 64, 32, 16),
    how=f"NNCF compress_weights INT4_SYM (data-free, group {GROUP} (tune: 128 to 16), ratio 1.0; embeddings and lm_head int8 "
        f"asymmetric), {_CACHE}; {_DEFAULTS}",
)
OPTIMUM_INT4 = DecoderVariant(
    runtime=("openvino",),
    name="optimum-intel-int4", engine="openvino", weights="int4", promise=Promise.QUANTIZED,
    build=build_optimum_int4, load=OpenVinoDecoderSession, packages=FLOAT_PACKAGES, available=OPTIMUM_INTEL.available,
    how="a peer's file: optimum-intel's CLI (`optimum-cli export openvino --task text-generation-with-past "
        "--weight-format int4 --group-size-fallback adjust`: int4 asymmetric, group 128 or the largest that divides "
        "a linear; its own venv), run by mobilize's OpenVINO session",
)
