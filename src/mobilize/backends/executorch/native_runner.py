"""The native ExecuTorch programs (``cpp/``): ``bench_executorch`` (speed_benchmark_torch's flags, plus
``--describe_inputs`` and the camera-frame loop) and the ``--emit-app`` skeleton, built against the
ExecuTorch runtime the executorch wheel ships, with the XNNPACK delegate."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from mobilize.core.native_runner import NativeRunner


def _details(target: Any, notes: list[str], registered_backends: Sequence[str]) -> dict[str, Any]:
    from mobilize.backends.executorch.native import native_details

    return native_details(target, notes, registered_backends)


RUNNER = NativeRunner(
    family="executorch",
    display_name="ExecuTorch (XNNPACK delegate)",
    package="executorch",
    sources_dir=Path(__file__).with_name("cpp"),
    cmake_template="CMakeLists.executorch.txt",
    cmake_root_var="EXECUTORCH_ROOT",
    cmake_root_subdir="",
    required_files=(
        "include/executorch/extension/module/module.h", "include/executorch/extension/tensor/tensor.h",
        "share/cmake/executorch-config.cmake", "lib/libexecutorch{lib}", "lib/libexecutorch_backend_xnnpack{lib}",
        "lib/libexecutorch_kernels_optimized{lib}", "lib/libexecutorch_threadpool{lib}"),
    bench_source="bench_executorch.cpp",
    bench_headers=("tensor_file.h", "bench_common.h", "bpte.h", "camera_convert.h", "frame_loop.h"),
    app_source="app_executorch.cpp",
    app_headers=("tensor_file.h", "bpte.h", "camera_convert.h", "frame_loop.h"),
    runtime_args={"executorch": ()},
    app_defines={"executorch": {"MOBILIZE_LITE": "0"}},
    reads_declared_inputs=True,
    frames=True,
    bundled_suffix=".bpte",
    details=_details,
)
