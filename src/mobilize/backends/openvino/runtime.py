"""OpenVINO (when installed): runs IR (``.xml`` + ``.bin``) and ``.onnx`` files on its CPU plugin.

Compiled for latency the way OpenVINO's ``benchmark_app -hint latency`` does: one stream, the
LATENCY hint, and the thread count given.  The inference precision is always set explicitly:
the one the IR was made for (``rt_info/runtime_options/INFERENCE_PRECISION_HINT``, written by
mobilize's openvino exporter), else f32 — OpenVINO's own default on CPUs with AMX or
AVX512-BF16 is bf16, which would make a "float32" file compute in bfloat16.  ``details()``
reports what the compiled model really runs each layer in, read from OpenVINO's runtime model.

An fp16 IR on a CPU without native fp16 (AVX2 x86): the plugin computes in f32 on the fp16-rounded weights,
``details()["computes_in"]`` says ``f32`` and the layers read "f32 with f16 weights".
"""

from __future__ import annotations

import collections
from typing import Any, Sequence

from mobilize.core.errors import UnsupportedModelError, translate_errors
from mobilize.runtimes.base import Session, as_array
from mobilize.core.inputs import InputSpec

PRECISION_KEY = ["runtime_options", "INFERENCE_PRECISION_HINT"]
"""The IR's own inference precision (same key as the exporter writes; runtimes never import exporters)."""
_HEAVY = ("Convolution", "FullyConnected", "MatMul", "Deconvolution", "GroupConvolution", "GRUSequence",
          "LSTMSequence", "ScaledDotProductAttention")
_OV_TYPES = {"f32": "float", "f16": "float16", "bf16": "bfloat16", "i64": "int64", "i32": "int32", "u8": "uint8",
             "i8": "int8", "boolean": "bool"}
_PRECISION_NAMES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "f32": "f32", "bf16": "bf16",
                    "f16": "f16"}


class OpenVinoSession(Session):
    name = "openvino"
    formats = ("openvino", "onnx")
    packages = ("openvino",)
    needs_torch = False

    def _load(self) -> None:
        import openvino as ov

        self.core = ov.Core()
        path = str(self.target.path)
        # OpenVINO raises RuntimeError / GeneralFailure with the reader's reason
        with translate_errors(UnsupportedModelError, f"OpenVINO could not read {path}",
                              message=lambda exc: f"OpenVINO could not read {path}: {_first_line(exc)}"):
            self.model = self.core.read_model(path)
        self.precision = "f32"
        if self.model.has_rt_info(PRECISION_KEY):
            self.precision = _PRECISION_NAMES.get(str(self.model.get_rt_info(PRECISION_KEY).astype(str)), "f32")
        self._compile(self.options.threads)

    def _compile(self, threads: int | None) -> None:
        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
                                  "INFERENCE_PRECISION_HINT": self.precision}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        what = f"OpenVINO could not compile {self.target.path}"
        with translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what}: {_first_line(exc)}"):
            self.compiled = self.core.compile_model(self.model, "CPU", config)
        self.request = self.compiled.create_infer_request()
        self._bound: list | None = None  # the prepared inputs bound to this request (run_prepared)
        self.threads = threads
        # The plugin falls back to f32 where the CPU has no native f16/bf16 (an AVX2-only x86 takes an f16 hint
        # and computes in f32): what it will really compute in is its compiled property, not what was asked.
        self.effective_precision = _precision_name(self.compiled.get_property("INFERENCE_PRECISION_HINT"))
        self._ran_in = _runtime_precisions(self.compiled, self.effective_precision)
        asked, effective = self.precision, self.effective_precision
        if effective != asked:
            self.notes.append(f"openvino: asked for {asked} inference; the CPU plugin computes in {effective} on this "
                              f"CPU (its capabilities: {', '.join(self.core.get_property('CPU', 'OPTIMIZATION_CAPABILITIES'))})")

    # -- inputs ---------------------------------------------------------------------------
    def declared_input_specs(self) -> list[InputSpec]:
        specs = []
        for port in self.compiled.inputs:
            shape = port.get_partial_shape()
            dims = tuple(d.get_length() if d.is_static else -1 for d in shape) if shape.rank.is_static else ()
            specs.append(InputSpec(dims, _OV_TYPES.get(port.get_element_type().get_type_name(), "float")))
        return specs

    def prepare(self, inputs: Sequence[Any]) -> list:
        return [as_array(t) for t in inputs]

    # -- running --------------------------------------------------------------------------
    def run_prepared(self, native: list) -> Any:
        # The prepared arrays are bound to the request once (share_inputs: read in place, not copied), then
        # each further run of the same prepared inputs is infer() alone, as benchmark_app's sync loop runs
        # ("inputs filling are not included in measurement loop"); passing them to every infer() lengthened
        # even the request's own C++-measured latency (benchmarks/tool_agreement.py compares the two tools).
        if native is self._bound:
            return list(self.request.infer().values())
        self._bound = native  # held: the request reads these arrays in place (an array of another dtype
        # than its input port's is converted once, here, as OpenVINO's data dispatcher does)
        return list(self.request.infer(native, share_inputs=True).values())

    def outputs_to_torch(self, raw: Any) -> list:
        import numpy as np
        import torch

        return [torch.from_numpy(np.array(a)) for a in raw]  # a copy: the request reuses its output buffers

    def set_threads(self, threads: int) -> None:
        if threads != self.threads:
            self._compile(threads)

    def details(self) -> dict[str, Any]:
        import openvino as ov

        props = {}
        for key in ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS", "PERFORMANCE_HINT",
                    "ENABLE_CPU_PINNING", "ENABLE_HYPER_THREADING", "SCHEDULING_CORE_TYPE"):
            try:
                value = self.compiled.get_property(key)
            except RuntimeError:  # "Unsupported property: KEY": one this OpenVINO version does not have: leave it out
                continue
            props[key.lower()] = value.get_type_name() if hasattr(value, "get_type_name") else str(value)
        ran = self._ran_in
        return {"openvino_version": ov.get_version(), "inference_precision": self.precision,
                "computes_in": self.effective_precision,
                "ran_in": ran["summary"], "layer_precisions": ran["layers"], "compiled": props}

    def close(self) -> None:
        self.request = self.compiled = self._bound = None


def _precision_name(value: Any) -> str:
    """OpenVINO's element type (``<Type: 'float32'>``) or string as f32/f16/bf16."""
    name = value.get_type_name() if hasattr(value, "get_type_name") else str(value)
    return _PRECISION_NAMES.get(name, name)


def _runtime_precisions(compiled: Any, hint: str) -> dict[str, Any]:
    """What the CPU plugin runs each layer in, from its runtime model's ``runtimePrecision``.

    With an f32 hint, a layer reading fp16-compressed weights reports f16 but computes in f32 (checked
    here against PyTorch: it matches f32 arithmetic on fp16-rounded weights to 1e-7), so below the
    hint it is reported as "f32 (f16 weights)"."""
    layers: collections.Counter = collections.Counter()
    heavy: collections.Counter = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        kind = str(info["layerType"].astype(str)) if "layerType" in info else op.get_type_name()
        if kind in ("Input", "Output", "Const", "Parameter", "Result", "Constant"):
            continue
        precision = str(info["runtimePrecision"].astype(str)) if "runtimePrecision" in info else "?"
        if precision in ("i8", "u8"):
            precision = "int8"
        elif precision in ("bf16", "f16") and precision != hint and hint == "f32":
            precision = f"f32 with {precision} weights"
        layers[f"{kind}:{precision}"] += 1
        if kind in _HEAVY:
            heavy[precision] += 1
    if not heavy:
        return {"main": "none", "summary": "no conv/matmul layers", "layers": dict(layers)}
    main, count = heavy.most_common(1)[0]
    rest = ", ".join(f"{n} in {p}" for p, n in heavy.most_common()[1:])
    summary = f"{main} ({count} of {sum(heavy.values())} conv/matmul layers{'; ' + rest if rest else ''})"
    return {"main": main, "summary": summary, "layers": dict(layers)}


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    for ln in lines:  # OpenVINO prefixes its reason with a C++ location line
        if not ln.startswith(("Exception from", "Check ", "[ ")) and ".cpp:" not in ln:
            text = ln
            break
    return text[:300]
