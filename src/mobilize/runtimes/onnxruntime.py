"""ONNX Runtime: intra-op threads, graph optimization level, optionally saving the optimized graph.

    >>> s = RUNTIMES.get("onnxruntime").load(Artifact.from_file("model.onnx"), RuntimeOptions(threads=2))
    >>> s.run(s.example_inputs())[0].shape
    torch.Size([1, 1000])
"""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.artifact import Format
from mobilize.errors import ConfigError, UnsupportedModelError
from mobilize.runtimes import RUNTIMES
from mobilize.runtimes.base import Session
from mobilize.sources.inputs import InputSpec

_ORT_TYPES = {
    "tensor(float)": "float", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(uint8)": "uint8",
    "tensor(int8)": "int8", "tensor(bool)": "bool",
}
_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
           "layout": "ORT_ENABLE_LAYOUT", "all": "ORT_ENABLE_ALL"}


@RUNTIMES.register("onnxruntime")
class OnnxRuntimeSession(Session):
    name = "onnxruntime"
    formats = (Format.ONNX,)
    default_for = (Format.ONNX,)
    packages = ("onnxruntime",)

    def _load(self) -> None:
        self._make_session(self.options.threads)

    def _make_session(self, threads: int | None) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        level = self.options.graph_optimization_level
        if level not in _LEVELS:
            raise ConfigError(f"unknown graph optimization level '{level}'", hint=f"choose one of: {', '.join(_LEVELS)}")
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
        if threads:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        if self.options.optimized_model_path:
            opts.optimized_model_filepath = self.options.optimized_model_path
        opts.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(self.target.path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UnsupportedModelError(f"ONNX Runtime could not load {self.target.path}: {first}") from exc
        self.threads = threads
        self._names = [i.name for i in self.session.get_inputs()]

    def declared_input_specs(self) -> list[InputSpec]:
        specs = []
        for inp in self.session.get_inputs():
            shape = tuple(d if isinstance(d, int) and d > 0 else -1 for d in inp.shape)
            specs.append(InputSpec(shape, _ORT_TYPES.get(inp.type, "float")))
        return specs

    def example_inputs(self, seed: int = 0) -> list:
        declared = self.declared_input_specs()
        if any(d < 0 for s in declared for d in s.shape):
            dynamic = [f"{i.name} {list(i.shape)}" for i in self.session.get_inputs()]
            raise ConfigError(
                f"{self.target.path} has inputs with dynamic dimensions: {'; '.join(dynamic)}",
                hint='give --input_dims, e.g. --input_dims "1,3,224,224"',
            )
        return super().example_inputs(seed)

    def prepare(self, inputs: Sequence[Any]) -> dict:
        import numpy as np

        feed = {}
        for name, t in zip(self._names, inputs):
            arr = t.detach().contiguous().numpy() if hasattr(t, "detach") else np.asarray(t)
            feed[name] = np.ascontiguousarray(arr)
        return feed

    def run_prepared(self, native: dict) -> Any:
        return self.session.run(None, native)

    def set_threads(self, threads: int) -> None:
        if threads != self.threads:
            self._make_session(threads)

    def close(self) -> None:
        self.session = None
