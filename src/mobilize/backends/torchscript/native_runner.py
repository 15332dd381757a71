"""The native LibTorch programs (``cpp/``): ``bench_torch`` (speed_benchmark_torch's flags; ``--lite`` picks
the lite interpreter) and the ``--emit-app`` skeleton (``MOBILIZE_LITE``), built against the LibTorch the
torch wheel ships.  One runner serves both formats: TorchScript (.pt) and lite-interpreter (.ptl) files."""

from __future__ import annotations

from pathlib import Path

from mobilize.core.native_runner import NativeRunner

TORCH_CONFIG = "share/cmake/Torch/TorchConfig.cmake"

RUNNER = NativeRunner(
    family="torch",
    display_name="LibTorch",
    package="torch",
    sources_dir=Path(__file__).with_name("cpp"),
    cmake_template="CMakeLists.torch.txt",
    cmake_root_var="TORCH_CMAKE_DIR",
    cmake_root_subdir="share/cmake",
    required_files=("include/torch/script.h", "include/torch/csrc/jit/mobile/import.h", TORCH_CONFIG,
                    "lib/libtorch_cpu{lib}", "lib/libc10{lib}"),
    bench_source="bench_torch.cpp",
    bench_headers=("tensor_file.h", "bench_common.h"),
    app_source="app_torch.cpp",
    app_headers=("tensor_file.h",),
    runtime_args={"torchscript": ("--lite", "false"), "lite": ("--lite", "true")},
    app_defines={"torchscript": {"MOBILIZE_LITE": "0"}, "lite": {"MOBILIZE_LITE": "1"}},
    # the CUDA build of torch on aarch64 has a TorchConfig that needs the CUDA toolkit: its CPU libraries are
    # linked directly (TORCH_CPU_ONLY in the template), so TorchConfig.cmake itself is not required
    cross_optional=(TORCH_CONFIG,),
)
