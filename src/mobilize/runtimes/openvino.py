"""OpenVINO (when installed): runs ``.onnx`` files on its CPU plugin.

    >>> s = RUNTIMES.get("openvino").load(Artifact.from_file("model.onnx"), RuntimeOptions(threads=2))
"""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.artifact import Format
from mobilize.errors import UnsupportedModelError
from mobilize.runtimes import RUNTIMES
from mobilize.runtimes.base import Session


@RUNTIMES.register("openvino")
class OpenVinoSession(Session):
    name = "openvino"
    formats = (Format.ONNX,)
    packages = ("openvino",)

    def _load(self) -> None:
        self._compile(self.options.threads)

    def _compile(self, threads: int | None) -> None:
        import openvino as ov

        core = ov.Core()
        config = {"INFERENCE_NUM_THREADS": threads} if threads else {}
        try:
            self.compiled = core.compile_model(str(self.target.path), "CPU", config)
        except Exception as exc:
            raise UnsupportedModelError(f"OpenVINO could not compile {self.target.path}: {exc}") from exc
        self.request = self.compiled.create_infer_request()
        self.threads = threads

    def prepare(self, inputs: Sequence[Any]) -> list:
        return [t.detach().contiguous().numpy() for t in inputs]

    def run_prepared(self, native: list) -> Any:
        return list(self.request.infer(native).values())

    def set_threads(self, threads: int) -> None:
        if threads != self.threads:
            self._compile(threads)
