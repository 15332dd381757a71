"""LiteRT (TensorFlow Lite) ``.tflite`` through the ``ai-edge-litert`` interpreter with the XNNPACK delegate.

Threads go to the interpreter (and so to XNNPACK's pool); a thread change rebuilds it.  Inputs
are converted to what the file takes: NHWC where mobilize's exporter wrote it so (the layout is
read from the file's metadata), and int8 with the file's own scale and zero point for fully
integer models (outputs are dequantized back).  ``prepare`` does both once, outside the file-alone timed call;
the same-work unit (:meth:`LiteRTSession.run_float`) does them in every call, as an app feeding float pixels
does, and :meth:`LiteRTSession.interface` says which the file needs.  ``details()``
says which ops XNNPACK runs and which fall back to builtin kernels; a mostly-builtin model
gets a WARNING note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from mobilize.core import noise
from mobilize.core.errors import UnsupportedModelError, UserError, translate_errors
from mobilize.backends.litert.tflite import TfliteDelegation, read_tflite, tflite_delegation
from mobilize.runtimes.native_stderr import filtered_stderr
from mobilize.runtimes.base import Interface, Session, TensorInterface, as_array
from mobilize.core.inputs import InputSpec, MemoryFormat

_NUMPY_TO_SPEC = {"float32": "float", "float16": "float16", "int64": "int64", "int32": "int32", "int16": "int16",
                  "int8": "int8", "uint8": "uint8", "bool": "bool"}


class LiteRTSession(Session):
    name = "litert"
    formats = ("tflite",)
    packages = ("ai_edge_litert",)
    needs_torch = False

    def _load(self) -> None:
        path = Path(self.target.path)
        # a truncated or corrupt flatbuffer fails deep in the generated reader
        with translate_errors(UnsupportedModelError, f"LiteRT could not read {path}",
                              message=lambda exc: f"LiteRT could not read {path}: {type(exc).__name__}: {exc}"):
            try:
                self.facts = read_tflite(path)
            except ValueError as exc:
                raise UnsupportedModelError(f"LiteRT could not load {path}: {exc}") from exc
        self._build(self.options.threads)
        warning = self.delegation.warning()
        if warning and not any(warning in n for n in getattr(self.target, "notes", [])):
            self.notes.append(f"litert: {warning}")

    def _build(self, threads: int | None) -> None:
        from ai_edge_litert.interpreter import Interpreter

        path = str(self.target.path)
        # ValueError / RuntimeError with the interpreter's reason
        with translate_errors(UnsupportedModelError, f"LiteRT could not load {path}"), quiet_native_output():
            interpreter = Interpreter(model_path=path, num_threads=threads)
            interpreter.allocate_tensors()
        self.interpreter = interpreter
        self.threads = threads
        self.delegation: TfliteDelegation = tflite_delegation(interpreter._get_ops_details())
        self._inputs, self._outputs = _signature_order(interpreter)
        layouts = self.facts.input_layouts or ()
        self._nhwc = [i < len(layouts) and layouts[i] == "nhwc" and len(d["shape"]) == 4
                      for i, d in enumerate(self._inputs)]

    # -- inputs ---------------------------------------------------------------------------
    def declared_input_specs(self) -> list[InputSpec]:
        specs = []
        for d, nhwc in zip(self._inputs, self._nhwc):
            shape = tuple(int(s) if s > 0 else -1 for s in d["shape_signature"])
            if nhwc:
                shape = (shape[0], shape[3], shape[1], shape[2])
            dtype = "float" if _quantized(d) else _NUMPY_TO_SPEC.get(d["dtype"].__name__, "float")
            specs.append(InputSpec(shape, dtype, MemoryFormat.CHANNELS_LAST if nhwc else MemoryFormat.CONTIGUOUS))
        return specs

    def prepare(self, inputs: Sequence[Any]) -> list:
        import numpy as np

        native = []
        for t, d, nhwc in zip(inputs, self._inputs, self._nhwc):
            if nhwc and len(t.shape) == 4:  # a channels-last tensor's NHWC view is its own buffer: no copy
                t = t.permute(0, 2, 3, 1) if hasattr(t, "permute") else t.transpose(0, 2, 3, 1)
            arr = as_array(t)
            if _quantized(d) and arr.dtype.kind == "f":
                scale, zero = d["quantization"]
                info = np.iinfo(d["dtype"])
                arr = np.clip(np.round(arr / scale) + zero, info.min, info.max).astype(d["dtype"])
            elif arr.dtype == np.int64 and d["dtype"] == np.int32:
                # the converter narrows int64 inputs (token ids, masks) to int32; values beyond int32 are refused
                if arr.size and (arr.max() > np.iinfo(np.int32).max or arr.min() < np.iinfo(np.int32).min):
                    raise UserError(f"input {len(native)} holds int64 values beyond int32, which the .tflite "
                                    f"file takes")
                arr = arr.astype(np.int32)
            if tuple(arr.shape) != tuple(d["shape"]) and any(dim < 0 for dim in d["shape_signature"]):
                self._resize(d, arr.shape)  # a dynamic dimension: size the interpreter for these inputs
            native.append(np.ascontiguousarray(arr))
        if len(native) != len(self._inputs):  # let run_prepared fail with the interpreter's words
            native += [None] * (len(self._inputs) - len(native))
        return native

    def interface(self) -> Interface:
        """Each input's element type and layout as the file takes it, each output's as it gives it, with the
        conversion from and to the reference's float tensors (``prepare`` / :meth:`float_outputs`)."""
        def one(d: dict, nhwc: bool | None, output: bool) -> TensorInterface:
            dtype = _NUMPY_TO_SPEC.get(d["dtype"].__name__, d["dtype"].__name__)
            steps = []
            if nhwc:
                steps.append("NCHW->NHWC transpose")
            if _quantized(d):
                scale, zero = d["quantization"]
                steps.append(f"{'dequantize' if output else 'quantize'} (scale {scale:.4g}, zero point {zero})")
            layout = "NHWC" if nhwc else ("NCHW" if len(d["shape"]) == 4 and nhwc is not None else "-")
            return TensorInterface(dtype, layout, ", ".join(steps))

        return Interface(tuple(one(d, nhwc, False) for d, nhwc in zip(self._inputs, self._nhwc)),
                         tuple(one(d, None, True) for d in self._outputs))

    def float_outputs(self, raw: list) -> list:
        """Outputs dequantized with the file's own scale and zero point (numpy: no torch in a lean worker)."""
        import numpy as np

        out = []
        for arr, d in zip(raw, self._outputs):
            if _quantized(d) and arr.dtype.kind in "iu":
                scale, zero = d["quantization"]
                arr = (arr.astype(np.float32) - np.float32(zero)) * np.float32(scale)
            out.append(arr)
        return out

    def _resize(self, detail: dict, shape: tuple) -> None:
        self.interpreter.resize_tensor_input(detail["index"], list(shape))
        self.interpreter.allocate_tensors()
        self._inputs, self._outputs = _signature_order(self.interpreter)

    # -- running --------------------------------------------------------------------------
    def run_prepared(self, native: list) -> list:
        interpreter = self.interpreter
        for d, arr in zip(self._inputs, native):
            interpreter.set_tensor(d["index"], arr)
        interpreter.invoke()
        return [interpreter.get_tensor(d["index"]) for d in self._outputs]

    def outputs_to_torch(self, raw: Any) -> list:
        import numpy as np
        import torch

        # a copy: the interpreter reuses its output buffers; run_float's outputs are already dequantized
        return [torch.from_numpy(np.array(arr)) for arr in self.float_outputs(raw)]

    def set_threads(self, threads: int) -> None:
        if threads != self.threads:
            self._build(threads)

    def details(self) -> dict[str, Any]:
        import ai_edge_litert

        d = self.delegation
        ran_in = f"{self.facts.precision} ({d.backend} runs {d.delegated_ops} of {d.total_ops} ops)"
        return {"delegation": d.to_json(), "precision": self.facts.precision, "ran_in": ran_in,
                "tflite": self.facts.to_json(), "litert_version": getattr(ai_edge_litert, "__version__", "?")}

    def close(self) -> None:
        self.interpreter = None


def delegation_of(path: str | Path, threads: int = 1) -> TfliteDelegation:
    """Which ops of a ``.tflite`` XNNPACK takes when LiteRT loads it (what this runtime will do)."""
    from ai_edge_litert.interpreter import Interpreter

    with quiet_native_output():
        interpreter = Interpreter(model_path=str(path), num_threads=threads)
        interpreter.allocate_tensors()  # applies the default (XNNPACK) delegate
    return tflite_delegation(interpreter._get_ops_details())


def _signature_order(interpreter: Any) -> tuple[list[dict], list[dict]]:
    """Input and output details in the signature's argument order (args_0, args_1 ... / output_0 ...)."""
    inputs = interpreter.get_input_details()
    outputs = interpreter.get_output_details()
    signatures = interpreter._get_full_signature_list()
    if len(signatures) != 1:
        return inputs, outputs
    sig = next(iter(signatures.values()))
    by_index = {d["index"]: d for d in inputs + outputs}

    def ordered(names: dict[str, int], fallback: list[dict]) -> list[dict]:
        indices = [names[k] for k in sorted(names, key=_arg_position)]
        return [by_index[i] for i in indices] if all(i in by_index for i in indices) else fallback

    return ordered(sig["inputs"], inputs), ordered(sig["outputs"], outputs)


def _arg_position(name: str) -> tuple[int, str]:
    tail = name.rsplit("_", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)


def _quantized(detail: dict) -> bool:
    scale, _ = detail["quantization"]
    return scale != 0.0 and detail["dtype"].__name__ in ("int8", "uint8", "int16")


def quiet_native_output():
    """Drop LiteRT's informational C++ log line ("Created TensorFlow Lite XNNPACK delegate for CPU.");
    anything else written to stderr meanwhile is passed through."""
    return filtered_stderr(noise.patterns())
