"""What an engine tells the native runner (``mobilize.native``) about its C++ programs: where the benchmark
and app sources and the CMake template are, which wheel carries the runtime, which flags pick a runtime,
and what the programs can do beyond timing (declared inputs, camera frames, bundled programs).

An engine declares one :class:`NativeRunner` per format in its descriptor (``Backend.native``:
format -> ``module:RUNNER``); ``mobilize.native`` asks it instead of naming engines.

    >>> from mobilize.core.backend import backend_for_format
    >>> runner = backend_for_format("lite").entry("native", "lite")
    >>> runner.family, runner.bench_source, runner.runtime_args["lite"]
    ('torch', 'bench_torch.cpp', ('--lite', 'true'))
    >>> backend_for_format("executorch").entry("native", "executorch").display_name
    'ExecuTorch (XNNPACK delegate)'
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

NativeDetails = Callable[[Any, list[str], Sequence[str]], dict[str, Any]]
"""``(target, notes, registered_backends) -> report fields``; may append to ``notes``."""


@dataclasses.dataclass(frozen=True)
class NativeRunner:
    family: str
    """The runtime family (``torch``: LibTorch, ``executorch``): names the wheel's runtime in messages and
    the arm64 report's ``versions``."""
    display_name: str
    """How an app's README names the runtime (``LibTorch``, ``ExecuTorch (XNNPACK delegate)``)."""
    package: str
    """The Python distribution whose wheel ships the C++ runtime (headers, shared libraries, CMake package)."""
    sources_dir: Path
    """The engine's folder of C++ sources and CMake template (``backends/<engine>/cpp``); a file not found
    there is taken from ``mobilize/native/cpp`` (the headers every engine shares)."""
    cmake_template: str
    """CMakeLists template in ``sources_dir`` (placeholders ``@PROJECT@``, ``@SOURCE@``, ``@<cmake_root_var>@``)."""
    cmake_root_var: str
    """The CMake cache variable that points the template at the runtime package (``TORCH_CMAKE_DIR``)."""
    cmake_root_subdir: str
    """Its value, relative to the installed package folder (``share/cmake``; empty: the folder itself)."""
    required_files: tuple[str, ...]
    """Files (relative to the package folder) a build needs; ``{lib}`` is the shared-library suffix."""
    bench_source: str
    """The benchmark program (speed_benchmark_torch's flags); its binary is named after it."""
    bench_headers: tuple[str, ...]
    """Headers the benchmark includes, copied next to it."""
    app_source: str
    """The ``--emit-app`` skeleton, written as the app's ``main.cpp``."""
    app_headers: tuple[str, ...]
    """Headers the app includes (besides the ``model_info.h`` it is written with), copied next to it."""
    runtime_args: Mapping[str, tuple[str, ...]]
    """Python runtime whose C++ core the benchmark runs -> the flags that select it; the keys are the
    runtimes ``bench --native --runtime`` accepts for this engine's files."""
    app_defines: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    """A format's default runtime -> ``#define``s its app's ``model_info.h`` adds (``MOBILIZE_LITE``)."""
    cross_optional: tuple[str, ...] = ()
    """Files of ``required_files`` an aarch64 cross build does without (linked directly instead)."""
    reads_declared_inputs: bool = False
    """The benchmark answers ``--describe_inputs`` (the program's declared input shapes, dtypes, dim order)."""
    frames: bool = False
    """The benchmark takes ``--frame_config`` (``bench --native --frames``) and an app takes ``--frame``
    (emitted with ``frame.nv21``)."""
    bundled_suffix: str = ""
    """Suffix of a bundled program an app loads instead of the file when one lies beside it (``.bpte``)."""
    details: NativeDetails | None = None
    """What a native report adds about the file it timed (ExecuTorch's delegation report)."""


__all__ = ["NativeRunner", "NativeDetails"]
