"""The native benchmarks and ``--emit-app`` projects cross-compiled for aarch64 (arm64 Linux).

Debian's ``g++-aarch64-linux-gnu`` builds them against the aarch64 wheels in the arm64 root that
``scripts/setup-arm64.sh`` makes (LibTorch from the aarch64 torch wheel, ExecuTorch from the aarch64
executorch wheel), through ``native/cpp/toolchain-aarch64.cmake``.  Benchmarks are cached like the host's
(``$MOBILIZE_CACHE_DIR/native/bench_<family>-aarch64-<key>``), keyed by the cross compiler, the wheel
versions and the sources; ``mobilize.arm64.native`` runs them under QEMU.  With the root and the cross
compiler in place (not a doctest: the default suite runs before the arm64 root exists on a fresh machine)::

    from mobilize.native.cross import build_binary_aarch64
    build_binary_aarch64("executorch").path.name    # 'bench_executorch'; ~35 s the first time, then instant
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from mobilize.core.errors import BackendUnavailableError, ConfigError
from mobilize.core.native_runner import NativeRunner
from mobilize.native.build import (CPP_DIR, BuiltBinary, RuntimePackage, Toolchain, command_first_line, key_parts,
                                   cache_root, cached_build, cmake_build, find_toolchain, runner_named)

CROSS_CXX = "aarch64-linux-gnu-g++"
TOOLCHAIN_TEMPLATE = "toolchain-aarch64.cmake"
SITE = Path("opt/mobilize/site")
"""Where the arm64 root keeps its aarch64 wheels (relative to the root)."""
SETUP = "sudo bash scripts/setup-arm64.sh"
EM_AARCH64 = 183
"""ELF e_machine of an AArch64 binary."""


def elf_machine(path: str | os.PathLike) -> int:
    """The ELF header's e_machine of ``path`` (183 = AArch64, 62 = x86-64)."""
    with open(path, "rb") as fh:
        head = fh.read(20)
    if head[:4] != b"\x7fELF":
        raise ConfigError(f"{path} is not an ELF file")
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


def rootfs() -> Path:
    from mobilize.core.paths import arm64_root

    return arm64_root() / "rootfs"


def cross_toolchain() -> Toolchain:
    """Debian's aarch64 cross compiler and CMake; refuses in one line when one is missing."""
    cxx = shutil.which(os.environ.get("MOBILIZE_AARCH64_CXX", CROSS_CXX))
    if cxx is None:
        raise BackendUnavailableError(f"an aarch64 build needs Debian's cross compiler {CROSS_CXX}, which was not found",
                                      hint=f"`{SETUP}` installs it (apt-get install g++-aarch64-linux-gnu)")
    host = find_toolchain()
    return Toolchain(cxx, command_first_line([cxx, "--version"]), host.cmake, host.cmake_version)


def aarch64_package(family: NativeRunner | str) -> RuntimePackage:
    """The aarch64 wheel of a runtime family inside the arm64 root, checked for the C++ files a build needs
    (less the runner's ``cross_optional`` ones)."""
    runner = runner_named(family)
    root = rootfs() / SITE / runner.package
    dist = sorted((rootfs() / SITE).glob(f"{runner.package}-*.dist-info"))
    if not root.is_dir() or not dist:
        raise BackendUnavailableError(f"no aarch64 {runner.package} wheel in {rootfs() / SITE}",
                                      hint=f"build the arm64 root with `{SETUP}`")
    version = dist[-1].name[len(runner.package) + 1:-len(".dist-info")]
    required = [rel.format(lib=".so") for rel in runner.required_files if rel not in runner.cross_optional]
    missing = [rel for rel in required if not (root / rel).exists()]
    if missing:
        raise BackendUnavailableError(
            f"the aarch64 {runner.package} {version} wheel at {root} has no C++ runtime to build against "
            f"(missing {', '.join(missing)})")
    return RuntimePackage(runner, root, version)


def toolchain_file(folder: Path | None = None) -> Path:
    """``toolchain-aarch64.cmake`` pointing at the arm64 root: in ``folder`` (an app project), else in the cache
    (named by its content, written once)."""
    text = (CPP_DIR / TOOLCHAIN_TEMPLATE).read_text().replace("@ARM64_ROOT@", str(rootfs()))
    if folder is not None:
        path = folder / TOOLCHAIN_TEMPLATE
        path.write_text(text)
        return path
    path = cache_root() / f"toolchain-aarch64-{hashlib.sha256(text.encode()).hexdigest()[:16]}.cmake"
    if not path.is_file():
        cache_root().mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


def build_binary_aarch64(family: NativeRunner | str, echo: Callable[[str], None] | None = None) -> BuiltBinary:
    """The benchmark program of a runner (or family name) built for aarch64 against the arm64 root's wheel, cached."""
    package = aarch64_package(family)
    toolchain = cross_toolchain()
    source = package.runner.bench_source
    tc = toolchain_file()
    parts = {**key_parts(source, toolchain, package), "target": "aarch64",
             "toolchain_file": hashlib.sha256(tc.read_bytes()).hexdigest()}
    return cached_build(source, package, toolchain, parts, tag="-aarch64", echo=echo,
                        cmake_args=[f"-DCMAKE_TOOLCHAIN_FILE={tc}"])


def build_app_aarch64(folder: Path, family: NativeRunner | str, echo: Callable[[str], None] | None = None) -> BuiltBinary:
    """An emitted app project (``mobilize.native.app``) built for aarch64 into ``folder/build-aarch64``, with
    ``toolchain-aarch64.cmake`` written beside its CMakeLists.txt (which points CMake at the root's wheels)."""
    from mobilize.native.app import PROJECT

    package = aarch64_package(family)
    toolchain = cross_toolchain()
    tc = toolchain_file(folder)
    build = folder / "build-aarch64"
    if echo:
        echo(f"building {folder.name} for aarch64 against {package.runner.package} {package.version} "
             f"({toolchain.cxx_version}) in {build}")
    t0 = time.perf_counter()
    cmake_build(folder, build, toolchain, f"the aarch64 app in {folder}", log=build / "build.log",
                cmake_args=[f"-DCMAKE_TOOLCHAIN_FILE={tc}"])
    binary = build / PROJECT
    if not binary.is_file():
        raise BackendUnavailableError(f"building the aarch64 app in {folder} produced no binary",
                                      hint=f"full log: {build / 'build.log'}")
    return BuiltBinary(binary, package.runner.family, False, time.perf_counter() - t0)


__all__ = ["EM_AARCH64", "elf_machine", "build_binary_aarch64", "build_app_aarch64", "aarch64_package",
           "cross_toolchain", "toolchain_file"]
