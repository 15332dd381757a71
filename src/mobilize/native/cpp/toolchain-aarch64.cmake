# Cross-build for aarch64 (arm64) Linux with Debian's g++-aarch64-linux-gnu, against the aarch64 wheels in the
# arm64 root that mobilize's scripts/setup-arm64.sh builds (LibTorch in its torch wheel, ExecuTorch in its
# executorch wheel). Written by mobilize:
#
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=toolchain-aarch64.cmake && cmake --build build-aarch64
#
# The compiler's own aarch64 C library (Debian's libc6-dev-arm64-cross, glibc 2.36 like the root's bookworm
# libc6) is the sysroot: the root is a minbase Debian without headers or crt files. Libraries and CMake
# packages are looked up in the root only. The binary runs on a 64-bit Arm Linux with glibc >= 2.36 and the
# wheel's libraries on its LD_LIBRARY_PATH; on an x86 host, under QEMU inside the root
# (mobilize bench --native --on arm64, mobilize optimize --emit-app DIR --target arm64).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(ARM64_ROOT "@ARM64_ROOT@" CACHE PATH "the arm64 root (its /opt/mobilize/site holds the aarch64 wheels)")
set(CMAKE_FIND_ROOT_PATH "${ARM64_ROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# The runtimes: the root's aarch64 wheels (these win over the host wheels CMakeLists.txt names by default).
set(TORCH_CMAKE_DIR "${ARM64_ROOT}/opt/mobilize/site/torch/share/cmake" CACHE PATH "LibTorch (aarch64)")
set(EXECUTORCH_ROOT "${ARM64_ROOT}/opt/mobilize/site/executorch" CACHE PATH "ExecuTorch (aarch64)")
# PyPI's only aarch64 torch wheel is a CUDA build: link LibTorch's CPU libraries directly (CMakeLists.txt)
set(TORCH_CPU_ONLY ON CACHE BOOL "link libtorch_cpu and libc10 directly")
