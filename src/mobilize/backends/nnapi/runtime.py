"""``nnapi_host``: run the NNAPI model inside a converted file on this host, to check its numbers.

The NNAPI runtime exists only on Android.  This runtime reads the serialized model the converter
wrote (:mod:`mobilize.backends.nnapi.nnapi_format`) and executes its operand and operation lists with torch ops,
with NNAPI's semantics and, for quantized tensors, the integer arithmetic of NNAPI's reference CPU
implementation (:mod:`mobilize.backends.nnapi.interpreter`).  The CPU steps a file runs around
its NNAPI model (the tutorial's ``core`` mode quantizes and dequantizes on the CPU) run as torch
runs them on the phone.

It is an accuracy tool, never a latency figure (``measures_latency = False``): a phone's NNAPI
driver runs on a DSP, GPU or NPU, and the host's speed says nothing about it.  At load it also
tries the real runtime through torch's own binding and records why it cannot run here.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Sequence

from mobilize.core.errors import UnsupportedModelError, UserError, translate_errors
from mobilize.backends.nnapi import nnapi_format as fmt
from mobilize.backends.nnapi.interpreter import Interpreter, quantize_tensor
from mobilize.runtimes.base import Interface, Session, TensorInterface
from mobilize.core.inputs import InputSpec, MemoryFormat

class NnapiHostSession(Session):
    name = "nnapi_host"
    formats = ("nnapi",)
    packages = ("torch",)
    measures_latency = False

    def _load(self) -> None:
        import torch

        with translate_errors(UnsupportedModelError, f"{self.target.path} is not a loadable TorchScript file"):
            self.module = torch.jit.load(str(self.target.path), map_location="cpu")
        self.pipeline = fmt.read_pipeline(self.module)
        self.payload = self.pipeline.payload
        self.model = fmt.parse_model(self.payload.ser_model)
        self._interpreters: dict[tuple, Interpreter] = {}
        if not self.model.flexible:
            self._interpreters[()] = Interpreter(self.model, self.payload.weights)
        reason = fmt.device_runtime_status(self.payload)
        self.device_runtime = "available (the real NNAPI runtime compiled this model)" if reason is None else \
            f"unavailable here: {reason}"
        self.notes.append(f"nnapi_host: numbers from mobilize's NNAPI reference interpreter, not a device; the real "
                          f"NNAPI runtime is {self.device_runtime}")
        if self.payload.relax_f32_to_f16:
            self.notes.append("nnapi_host: the file allows NNAPI to compute float32 in float16 (relax_f32_to_f16); "
                              "the interpreter computes float32, a device may differ by fp16 rounding")
        for i, index in enumerate(self.model.inputs):
            op = self.model.operands[index]
            if op.type == fmt.TENSOR_QUANT8_ASYMM and self.pipeline.quantize is None:
                self.notes.append(f"nnapi_host: input {i} is quint8 (scale {op.scale:.6g}, zero point {op.zero_point}); "
                                  f"float inputs are quantized to it here, as the app must do on the device")

    # -- inputs and outputs ---------------------------------------------------------------------------
    def declared_input_specs(self) -> list[InputSpec] | None:
        specs = []
        for i, index in enumerate(self.model.inputs):
            dims = self.model.operands[index].dims
            channels_last = self.payload.inp_mem_fmts[i] == 1
            shape = (dims[0], dims[3], dims[1], dims[2]) if channels_last else tuple(dims)
            specs.append(InputSpec(tuple(d if d > 0 else -1 for d in shape), "float",
                                   MemoryFormat.CHANNELS_LAST if channels_last else MemoryFormat.CONTIGUOUS))
        return specs

    def interface(self) -> Interface:
        """uint8 inputs when the file quantizes on the CPU first, NHWC where its payload says so (``prepare``)."""
        def one(i: int) -> TensorInterface:
            steps = (["NCHW->NHWC permute"] if self.payload.inp_mem_fmts[i] == 1 else []) + (
                [f"quantize (scale {self.pipeline.quantize[0]:.4g}, zero point {self.pipeline.quantize[1]})"]
                if self.pipeline.quantize is not None else [])
            rank = len(self.model.operands[self.model.inputs[i]].dims)
            layout = "NHWC" if self.payload.inp_mem_fmts[i] == 1 else ("NCHW" if rank == 4 else "-")
            return TensorInterface("uint8" if self.pipeline.quantize is not None else "float", layout, ", ".join(steps))

        return Interface(tuple(one(i) for i in range(len(self.model.inputs))))

    def prepare(self, inputs: Sequence[Any]) -> list:
        import torch

        if len(inputs) != len(self.model.inputs):
            raise UserError(f"the NNAPI model takes {len(self.model.inputs)} input(s) but {len(inputs)} were given")
        native = []
        for i, (t, index) in enumerate(zip(inputs, self.model.inputs)):
            t = t if isinstance(t, torch.Tensor) else torch.as_tensor(t)
            if self.pipeline.quantize is not None:
                if t.is_quantized:
                    raise UserError(f"input {i} is quantized; this file takes float input and quantizes it on the CPU")
                scale, zero_point = self.pipeline.quantize
                t = torch.quantize_per_tensor(t.float(), scale, zero_point, torch.quint8)
            if self.payload.inp_mem_fmts[i] == 1:
                t = t.permute(0, 2, 3, 1)
            native.append(self._to_operand(i, t.contiguous(), self.model.operands[index]))
        return native

    def _to_operand(self, i: int, t: Any, op: fmt.Operand) -> Any:
        """What NNAPI reads from the input's bytes (it takes the model's operand type, not the tensor's)."""
        import torch

        if op.type == fmt.TENSOR_FLOAT32:
            if t.dtype != torch.float32:
                raise UserError(f"input {i} is {str(t.dtype).replace('torch.', '')}; the NNAPI model's input operand "
                                f"is {fmt.describe_operand(op)}", hint="give a float32 tensor")
            return t
        if op.type != fmt.TENSOR_QUANT8_ASYMM:
            raise UnsupportedModelError(f"NNAPI input operand type {fmt.operand_type_name(op.type)} is not handled")
        if t.dtype == torch.quint8:
            if not math.isclose(t.q_scale(), op.scale, rel_tol=1e-6) or t.q_zero_point() != op.zero_point:
                raise UserError(f"input {i} is quint8 with scale {t.q_scale():.6g}, zero point {t.q_zero_point()}; "
                                f"NNAPI reads its bytes as {fmt.describe_operand(op)}",
                                hint="quantize the input with the model's scale and zero point (see the manifest)")
            return t.int_repr().long()
        if t.is_floating_point():
            return quantize_tensor(t.float(), op)
        raise UserError(f"input {i} is {t.dtype}; the NNAPI model's input operand is {fmt.describe_operand(op)}")

    def run_prepared(self, native: list) -> list:
        import torch

        interpreter = self._interpreter(native)
        results = []
        for i, (value, index) in enumerate(zip(interpreter.run(native), interpreter.model.outputs)):
            op = interpreter.operands[index]
            if op.type == fmt.TENSOR_QUANT8_ASYMM:
                value = torch._make_per_tensor_quantized_tensor(value.to(torch.uint8), op.scale, op.zero_point)
            if self.payload.out_mem_fmts[i] == 1:
                value = value.permute(0, 3, 1, 2)
            if self.pipeline.dequantize:
                value = value.dequantize()
            results.append(value)
        return results

    def _interpreter(self, native: list) -> "Interpreter":
        if () in self._interpreters:
            return self._interpreters[()]
        key = tuple(tuple(t.shape) for t in native)
        if key not in self._interpreters:
            import torch

            args = []  # the shape-compute module expects the tensors NnapiModule.forward receives
            for i, t in enumerate(native):
                args.append(t.permute(0, 3, 1, 2) if self.payload.inp_mem_fmts[i] == 1 else t)
            words = self.payload.ser_model_for([torch.zeros(a.shape) for a in args])
            self._interpreters[key] = Interpreter(fmt.parse_model(words), self.payload.weights)
        return self._interpreters[key]

    def bundled_inputs(self) -> list[list]:
        if not hasattr(self.module, "get_all_bundled_inputs"):
            return super().bundled_inputs()
        return [list(inp) for inp in self.module.get_all_bundled_inputs()]

    def set_threads(self, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.threads = threads

    def details(self) -> dict[str, Any]:
        model = self.model
        return {"nnapi": {
            "device_runtime": self.device_runtime,
            "structure": self.pipeline.structure,
            "operations": dict(collections.Counter(model.operation_names())),
            "operands": len(model.operands),
            "inputs": [fmt.describe_operand(model.operands[i]) for i in model.inputs],
            "outputs": [fmt.describe_operand(model.operands[i]) for i in model.outputs],
            "cpu_quantize_input": self.pipeline.quantize, "cpu_dequantize_output": self.pipeline.dequantize,
            "latency": "on device only",
        }}

    def close(self) -> None:
        self.module = None
        self._interpreters = {}


