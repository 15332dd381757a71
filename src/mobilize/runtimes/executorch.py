"""ExecuTorch ``.pte`` (and bundled ``.bpte``) through the pybindings runtime, with threads.

Thread count is set with the pybindings threadpool reset (XNNPACK's pthreadpool).

    >>> s = RUNTIMES.get("executorch").load(Artifact.from_file("model.pte"), RuntimeOptions(threads=2))
    >>> s.run(s.example_inputs())[0].shape
    torch.Size([1, 1000])
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from typing import Any, Sequence

from mobilize.artifact import Format
from mobilize.errors import UnsupportedModelError
from mobilize.runtimes import RUNTIMES
from mobilize.runtimes.base import Session
from mobilize.sources.inputs import InputSpec

# ExecuTorch ScalarType codes -> --input_type spelling.
_SCALAR_TYPES = {0: "uint8", 1: "int8", 3: "int32", 4: "int64", 5: "float16", 6: "float", 7: "float64", 11: "bool"}


_NATIVE_NOISE = ("cpuinfo_utils.cpp", "threadpool.cpp", "Failed to load /", "KernelPreference")


@contextlib.contextmanager
def quiet_native_stderr():
    """Drop ExecuTorch's informational C++ log lines (cpuinfo probing, threadpool resets);
    anything else written to stderr meanwhile is passed through."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode("utf-8", "replace").splitlines():
                if line.strip() and not any(n in line for n in _NATIVE_NOISE):
                    print(line, file=sys.stderr)


def portable_lib() -> Any:
    import torch  # noqa: F401  (loads libtorch before the extension, as ExecuTorch requires)

    with warnings.catch_warnings(), quiet_native_stderr():
        warnings.simplefilter("ignore")
        from executorch.extension.pybindings import portable_lib as lib
    return lib


def check_pte_header(path, identifiers: tuple[bytes, ...] = (b"ET",)) -> None:
    """A flatbuffer's file identifier sits at bytes 4..8 ('ET12' for programs, 'BP..' for bundled).

    The runtime aborts the whole process on a corrupt file, so check before handing it over."""
    with open(path, "rb") as fh:
        head = fh.read(8)
    if len(head) < 8 or not any(head[4:8].startswith(i) for i in identifiers):
        raise UnsupportedModelError(f"{path} is not an ExecuTorch program (no ExecuTorch flatbuffer header)")


@RUNTIMES.register("executorch")
class ExecuTorchSession(Session):
    name = "executorch"
    formats = (Format.EXECUTORCH,)
    default_for = (Format.EXECUTORCH,)
    packages = ("executorch",)

    @classmethod
    def import_backend(cls) -> None:
        portable_lib()

    def _load(self) -> None:
        lib = portable_lib()
        path = str(self.target.path)
        self.bundled = path.endswith(".bpte")
        check_pte_header(path, (b"BP",) if self.bundled else (b"ET",))
        try:
            with quiet_native_stderr():
                self._open(lib, path)
            self._meta = self.module.method_meta("forward")
        except Exception as exc:
            raise UnsupportedModelError(f"ExecuTorch could not load {path}: {str(exc).strip()}") from exc

    def _open(self, lib, path: str) -> None:
        if self.bundled:
            with open(path, "rb") as fh:
                self._bundle = lib._load_bundled_program_from_buffer(fh.read())
            self.module = lib._load_for_executorch_from_bundled_program(self._bundle)
        else:
            self.module = lib._load_for_executorch(path)

    def declared_input_specs(self) -> list[InputSpec]:
        specs = []
        for i in range(self._meta.num_inputs()):
            info = self._meta.input_tensor_meta(i)
            specs.append(InputSpec(tuple(info.sizes()), _SCALAR_TYPES.get(info.dtype(), "float")))
        return specs

    def prepare(self, inputs: Sequence[Any]) -> tuple:
        import torch

        return tuple(torch.as_tensor(t).contiguous() for t in inputs)

    def run_prepared(self, native: tuple) -> Any:
        return self.module.forward(native)

    def bundled_inputs(self) -> list[list]:
        if not self.bundled:
            return super().bundled_inputs()
        from mobilize.exporters._bundled_program import bundled_inputs

        return bundled_inputs(self.target.path)

    def set_threads(self, threads: int) -> None:
        lib = portable_lib()
        with quiet_native_stderr():
            lib._unsafe_reset_threadpool(threads)
        self.threads = threads

    def close(self) -> None:
        self.module = None
