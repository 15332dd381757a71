"""ExecuTorch ``.pte`` (and bundled ``.bpte``) through the pybindings runtime, with threads.

Thread count is set with the pybindings threadpool reset (XNNPACK's pthreadpool).  XNNPACK binds
a program to the pool that exists when the program is loaded, and the reset destroys that pool,
so the pool is sized before loading, and a later change reloads every open program (running one
loaded before a reset is a use-after-free: it crashed a benchmark here).  Inputs are
converted to the dim order the program was exported with (ExecuTorch itself does not check:
an NCHW tensor fed to a channels-last program gives wrong numbers silently).  A ``.bpte``
also verifies itself against its bundled expected outputs.
"""

from __future__ import annotations

import dataclasses

import warnings
import weakref
from typing import Any, Sequence

from mobilize.core import noise
from mobilize.core.errors import ConfigError, UnsupportedModelError, translate_errors
from mobilize.backends.executorch.pte import BUNDLE_ID, SCALAR_TYPES, check_header
from mobilize.runtimes.native_stderr import filtered_stderr
from mobilize.runtimes.base import Session
from mobilize.core.inputs import InputSpec, MemoryFormat, input_type_name


def quiet_native_stderr():
    """Drop ExecuTorch's informational C++ log lines (cpuinfo probing, threadpool resets: the noise its
    descriptor and :mod:`mobilize.core.noise` name); anything else written to stderr meanwhile is passed through."""
    return filtered_stderr(noise.patterns())


def portable_lib() -> Any:
    """ExecuTorch's pybindings extension (``executorch.extension.pybindings._C``), imported directly after torch.

    Its public wrapper, ``portable_lib``, re-exports the same names but first imports ``executorch.exir`` (and with it
    torchao) only to name the class of the warning it raises: a timing worker that loads a ``.pte`` took 5.1 s and
    364 MB to import it, 1.4 s and 227 MB with the extension alone (2-core Zen 4, with torch). The wrapper's one other
    step is kept (:func:`_openvino_lib_path`); the wrapper itself is the fallback where a release moves ``_C``."""
    import torch  # noqa: F401  (loads libtorch before the extension, as ExecuTorch requires)

    _openvino_lib_path()
    with warnings.catch_warnings(), quiet_native_stderr():
        warnings.simplefilter("ignore")
        try:
            from executorch.extension.pybindings import _C as lib
        except ImportError:
            from executorch.extension.pybindings import portable_lib as lib
    return lib


def _openvino_lib_path() -> None:
    """As ``portable_lib`` does: the extension's OpenVINO backend finds OpenVINO's C library through
    ``OPENVINO_LIB_PATH``, set here from the installed ``openvino`` package where the user has not set it."""
    import os

    from mobilize.core.packages import location

    folder = None if os.environ.get("OPENVINO_LIB_PATH") else location("openvino")
    libs = sorted((folder / "libs").glob("libopenvino_c.so*")) if folder else []
    if libs:
        os.environ["OPENVINO_LIB_PATH"] = str(libs[0])


@dataclasses.dataclass(frozen=True)
class ExecuTorchOptions:
    reuse_outputs: bool = False
    """Run without copying outputs out of the program's memory-planned buffers (``run`` still hands out
    copies, since the next run overwrites those buffers)."""


class ExecuTorchSession(Session):
    name = "executorch"
    Options = ExecuTorchOptions
    formats = ("executorch",)
    packages = ("executorch",)

    @classmethod
    def import_backend(cls) -> None:
        portable_lib()

    def _load(self) -> None:
        path = str(self.target.path)
        # The header, not the suffix, says which loader: a renamed .bpte still loads.
        self.bundled = check_header(path).startswith(BUNDLE_ID)
        if self.options.threads is not None:
            _size_pool(self.options.threads)  # before loading: the program binds to the pool it finds
        self._reload()
        _OPEN.add(self)
        self._read_program(path)

    def _reload(self) -> None:
        path = str(self.target.path)
        with translate_errors(UnsupportedModelError, f"ExecuTorch could not load {path}",
                              message=lambda exc: f"ExecuTorch could not load {path}: {str(exc).strip()}"):
            with quiet_native_stderr():
                self._open(portable_lib(), path)
            self._meta = self.module.method_meta("forward")

    def _open(self, lib, path: str) -> None:
        if self.bundled:
            with open(path, "rb") as fh:
                self._bundle = lib._load_bundled_program_from_buffer(fh.read())
            self.module = lib._load_for_executorch_from_bundled_program(self._bundle)
        else:
            self.module = lib._load_for_executorch(path)

    def _read_program(self, path: str) -> None:
        from mobilize.backends.executorch.delegation import delegation_report
        from mobilize.backends.executorch.pte import is_channels_last, program_bytes, read_program

        # Without the dim orders an NCHW tensor could be fed to a channels-last program: ExecuTorch does
        # not check, and the answers would be silently wrong.  A program we cannot read is refused.
        with translate_errors(UnsupportedModelError, f"reading the input memory layout of {path}",
                              message=lambda exc: f"cannot read the input memory layout of {path} ({type(exc).__name__}: "
                                                  f"{exc}); refusing to run it with a guessed layout"):
            orders = read_program(program_bytes(path)).input_dim_orders
        self.delegation = delegation_report(path)
        self._channels_last = [is_channels_last(o) for o in orders]
        warning = self.delegation.warning()
        if warning and not any(warning in n for n in getattr(self.target, "notes", [])):
            self.notes.append(f"executorch: {warning}")

    def declared_input_specs(self) -> list[InputSpec]:
        specs = []
        for i in range(self._meta.num_inputs()):
            info = self._meta.input_tensor_meta(i)
            fmt = MemoryFormat.CHANNELS_LAST if self._is_channels_last(i) else MemoryFormat.CONTIGUOUS
            specs.append(InputSpec(tuple(info.sizes()), input_type_name(SCALAR_TYPES.get(info.dtype(), "float32")), fmt))
        return specs

    def _is_channels_last(self, i: int) -> bool:
        return i < len(self._channels_last) and self._channels_last[i]

    def prepare(self, inputs: Sequence[Any]) -> tuple:
        import torch

        return tuple(torch.as_tensor(t).contiguous(memory_format=torch.channels_last) if self._is_channels_last(i)
                     else torch.as_tensor(t).contiguous() for i, t in enumerate(inputs))

    def run_prepared(self, native: tuple) -> Any:
        return self.module.forward(native, clone_outputs=not self.own.reuse_outputs)

    def outputs_to_torch(self, raw: Any) -> list:
        outputs = super().outputs_to_torch(raw)
        return [t.clone() for t in outputs] if self.own.reuse_outputs else outputs

    def bundled_inputs(self) -> list[list]:
        if not self.bundled:
            return super().bundled_inputs()
        from mobilize.backends.executorch.bpte import bundled_inputs

        return bundled_inputs(self.target.path)

    def run_bundled_cases(self, atol: float, rtol: float) -> list[tuple[list, list, bool]]:
        """Run each bundled test case: (outputs, expected outputs, ExecuTorch's own check passed).
        The verdict is the verify core's; ExecuTorch's check is a cross-check."""
        from mobilize.backends.executorch.bpte import read_test_cases

        if not self.bundled:
            raise ConfigError(f"{self.target.path} is not a bundled program", hint="export with bundle: true (.bpte)")
        results = []
        for i, case in enumerate(read_test_cases(self.target.path)):
            try:
                with quiet_native_stderr():
                    self._bundle.verify_result_with_bundled_expected_output("forward", i, rtol=rtol, atol=atol)
                ok = True
            except RuntimeError:  # "Result verification failed with status 32"
                ok = False
            results.append((self.run(case.inputs), [e for e in case.expected_outputs if hasattr(e, "float")], ok))
        return results

    def details(self) -> dict[str, Any]:
        return {"delegation": self.delegation.to_json()} if self.delegation is not None else {}

    def set_threads(self, threads: int) -> None:
        _size_pool(threads)
        self.threads = threads

    def close(self) -> None:
        _OPEN.discard(self)
        self.module = self._bundle = None


_OPEN: "weakref.WeakSet[ExecuTorchSession]" = weakref.WeakSet()
"""Sessions with a program loaded in this process: all bound to the one shared threadpool."""


def _size_pool(threads: int) -> None:
    """Resize ExecuTorch's process-wide threadpool; reload every open program onto the new pool."""
    lib = portable_lib()
    with quiet_native_stderr():  # the first threadpool access probes cpuinfo, noisily
        if lib._threadpool_get_thread_count() == threads:
            return
        lib._unsafe_reset_threadpool(threads)
    for session in list(_OPEN):
        if session.module is not None:
            session._reload()
