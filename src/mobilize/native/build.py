"""Build mobilize's native benchmarks once per toolchain and wheel, and cache them on disk.

Each engine that runs outside Python declares a :class:`~mobilize.core.native_runner.NativeRunner`
(``Backend.native``): its C++ sources and CMake template ship in its own folder
(``mobilize/backends/<engine>/cpp``), the headers every engine shares in ``mobilize/native/cpp``.
They are compiled with CMake against the runtime the engine's installed wheel carries (headers,
shared libraries, CMake package).  A binary is keyed by compiler, CMake, wheel versions and locations,
and a hash of the sources, kept under ``$MOBILIZE_CACHE_DIR/native`` (default
``~/.cache/mobilize/native``) and installed atomically, so concurrent builds never expose a
half-written file.  Anything missing (no compiler, no CMake, a wheel without headers) is a
one-line ``BackendUnavailableError`` that names it and says how to get it.

    >>> from mobilize.native.build import ensure_binary
    >>> path = ensure_binary("executorch")        # ~10 s the first time, then instant
    >>> path.name
    'bench_executorch'
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from mobilize.core.backend import backend_for_format, entries
from mobilize.core.errors import BackendUnavailableError, ConfigError
from mobilize.core.native_runner import NativeRunner
from mobilize.core.packages import location

CPP_DIR = Path(__file__).parent / "cpp"
"""The headers every engine's native programs share (and the aarch64 toolchain file)."""
LIB_SUFFIX = ".dylib" if sys.platform == "darwin" else ".so"


def runner_for_format(fmt: str) -> NativeRunner | None:
    """The native runner of a file format, or None when no engine runs that format outside Python."""
    backend = backend_for_format(str(fmt))
    return backend.entry("native", str(fmt)) if backend else None


def runners() -> dict[str, NativeRunner]:
    """Every engine's native runner, by family (one runner may serve several formats)."""
    found: dict[str, NativeRunner] = {}
    for fmt, (backend, _) in entries("native").items():
        runner = backend.entry("native", fmt)
        found.setdefault(runner.family, runner)
    return found


def runner_named(family: NativeRunner | str) -> NativeRunner:
    """``family`` itself, or the runner of that family name (``torch``, ``executorch``)."""
    if isinstance(family, NativeRunner):
        return family
    known = runners()
    if family not in known:
        raise ConfigError(f"unknown native runtime family '{family}'", hint=f"choose one of: {', '.join(known)}")
    return known[family]


def source_path(runner: NativeRunner, name: str) -> Path:
    """A C++ file of ``runner``: its own (in the engine's folder), else a shared one (``native/cpp``)."""
    own = runner.sources_dir / name
    return own if own.is_file() else CPP_DIR / name


@dataclasses.dataclass(frozen=True)
class Toolchain:
    cxx: str
    """Absolute path of the C++ compiler (``$MOBILIZE_CXX``, else ``$CXX``, else ``c++``)."""
    cxx_version: str
    cmake: str
    cmake_version: str


@dataclasses.dataclass(frozen=True)
class RuntimePackage:
    runner: NativeRunner
    root: Path
    """The installed package folder (``site-packages/torch``)."""
    version: str

    @property
    def cmake_value(self) -> str:
        """What the CMake template's root variable is set to."""
        return str(self.root / self.runner.cmake_root_subdir)


def cache_root() -> Path:
    """``$MOBILIZE_CACHE_DIR/native``, default ``~/.cache/mobilize/native``."""
    base = os.environ.get("MOBILIZE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "mobilize")
    return Path(base) / "native"


def command_first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({type(exc).__name__})"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def find_toolchain() -> Toolchain:
    """The C++ compiler and CMake a native build uses; refuses in one line when one is missing."""
    env = "MOBILIZE_CXX" if os.environ.get("MOBILIZE_CXX") else "CXX" if os.environ.get("CXX") else None
    name = os.environ[env] if env else "c++"
    cxx = shutil.which(name)
    if cxx is None:
        where = f" (from ${env})" if env else ""
        raise BackendUnavailableError(
            f"the native runner needs a C++17 compiler, and '{name}'{where} was not found",
            hint="install one (Debian/Ubuntu: apt-get install g++; macOS: xcode-select --install) "
                 "or point $MOBILIZE_CXX at it")
    cmake_name = os.environ.get("MOBILIZE_CMAKE", "cmake")
    cmake = shutil.which(cmake_name)
    if cmake is None:
        raise BackendUnavailableError(
            f"the native runner needs CMake 3.19 or newer, and '{cmake_name}' was not found",
            hint="pip install cmake, or apt-get install cmake, or point $MOBILIZE_CMAKE at it")
    return Toolchain(cxx, command_first_line([cxx, "--version"]), cmake, command_first_line([cmake, "--version"]))


def find_package(family: NativeRunner | str) -> RuntimePackage:
    """The installed wheel of a runtime family, checked for the C++ files a build needs."""
    runner = runner_named(family)
    root = location(runner.package)
    if root is None:
        raise BackendUnavailableError(f"the native {runner.family} runner needs the Python package '{runner.package}' "
                                      f"(its wheel carries the C++ runtime)", hint=f"pip install {runner.package}")
    missing = [rel.format(lib=LIB_SUFFIX) for rel in runner.required_files
               if not (root / rel.format(lib=LIB_SUFFIX)).exists()]
    version = importlib.metadata.version(runner.package)
    if missing:
        raise BackendUnavailableError(
            f"the {runner.package} {version} wheel at {root} has no C++ runtime to build against "
            f"(missing {', '.join(missing)})",
            hint=f"install a {runner.package} wheel that ships include/, lib/ and its CMake package "
                 f"(the PyPI wheels for Linux x86_64 and macOS arm64 do), or build {runner.package} from source")
    return RuntimePackage(runner, root, version)


def render_cmakelists(package: RuntimePackage, project: str, source: str) -> str:
    runner = package.runner
    text = source_path(runner, runner.cmake_template).read_text()
    return (text.replace("@PROJECT@", project).replace("@SOURCE@", source)
            .replace(f"@{runner.cmake_root_var}@", package.cmake_value))


def build_key(parts: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def key_parts(source: str, toolchain: Toolchain, package: RuntimePackage) -> dict[str, str]:
    """The build key of ``source`` (the benchmark): the bytes of every file its project is made of, wherever
    the file lives (the engine's folder or the shared one), the toolchain and the wheel."""
    runner = package.runner
    files = b"".join(source_path(runner, f).read_bytes() for f in (source, *runner.bench_headers))
    cmakelists = render_cmakelists(package, Path(source).stem, source).encode()
    return {
        "sources": hashlib.sha256(files + cmakelists).hexdigest(),
        "build_py": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "cxx": f"{toolchain.cxx} {toolchain.cxx_version}",
        "cmake": toolchain.cmake_version,
        "package": f"{package.runner.package}=={package.version} at {package.root}",
        "machine": f"{platform.system()} {platform.machine()}",
    }


def write_project(folder: Path, package: RuntimePackage, project: str, source: str,
                  main_text: str | None = None, headers: tuple[str, ...] | None = None) -> None:
    """A self-contained CMake project in ``folder``: the source (``main_text`` or the shipped file), the headers
    it includes (default: the benchmark's), each copied from the engine's folder or the shared one, and a
    CMakeLists.txt pointing at the installed wheel."""
    runner = package.runner
    folder.mkdir(parents=True, exist_ok=True)
    (folder / source).write_text(main_text if main_text is not None else source_path(runner, source).read_text())
    for header in runner.bench_headers if headers is None else headers:
        shutil.copyfile(source_path(runner, header), folder / header)
    (folder / "CMakeLists.txt").write_text(render_cmakelists(package, project, source))


def cmake_build(source_dir: Path, build_dir: Path, toolchain: Toolchain, what: str,
                log: Path | None = None, cmake_args: Sequence[str] = ()) -> None:
    """Configure and build a CMake project (Release); a failure names its stage and the log file.
    ``cmake_args`` go to the configure step (a cross-build's ``-DCMAKE_TOOLCHAIN_FILE=...``)."""
    jobs = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    steps = [("configure", [toolchain.cmake, "-S", str(source_dir), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                            f"-DCMAKE_CXX_COMPILER={toolchain.cxx}", *cmake_args]),
             ("compile", [toolchain.cmake, "--build", str(build_dir), "-j", jobs])]
    log = log or build_dir / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:
        for stage, cmd in steps:
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True)
            if done.returncode != 0:
                raise BackendUnavailableError(f"building {what} failed at {stage}: {_first_error(log)}",
                                              hint=f"full log: {log}")


def _first_error(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    for line in lines:
        if "error" in line.lower() and not line.startswith("$ "):
            return line.strip()[:300]
    return (lines[-1].strip() if lines else "no output")[:300]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (a second process building the same binary waits, then reuses it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            import fcntl
        except ImportError:  # no fcntl (Windows): builds may race, the atomic install keeps them safe
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def install_atomically(built: Path, final: Path) -> None:
    """Copy to a temp name in the final folder, then rename over the final name."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", dir=final.parent)
    os.close(fd)
    try:
        shutil.copy2(built, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@dataclasses.dataclass(frozen=True)
class BuiltBinary:
    path: Path
    family: str
    """The runner's family (``NativeRunner.family``)."""
    cached: bool
    """True when the binary was already in the cache (no compiler ran)."""
    build_s: float
    """Seconds spent configuring and compiling (0 when cached)."""


def ensure_binary(family: NativeRunner | str, echo: Callable[[str], None] | None = None) -> Path:
    """The benchmark binary of a runner (or of a family name: ``torch``, ``executorch``), built on first use."""
    return build_binary(family, echo).path


def build_binary(family: NativeRunner | str, echo: Callable[[str], None] | None = None) -> BuiltBinary:
    runner = runner_named(family)
    package = find_package(runner)
    toolchain = find_toolchain()
    source = runner.bench_source
    return cached_build(source, package, toolchain, key_parts(source, toolchain, package), echo=echo)


def cached_build(source: str, package: RuntimePackage, toolchain: Toolchain, parts: dict[str, str], *,
                 tag: str = "", cmake_args: Sequence[str] = (), echo: Callable[[str], None] | None = None
                 ) -> BuiltBinary:
    """The program ``source`` built against ``package`` with ``toolchain``, from the cache when ``parts`` (its
    build key) match; ``tag`` names a target other than this machine in the cache folder (``-aarch64``)."""
    family = package.runner.family
    name = Path(source).stem
    folder = cache_root() / f"{name}{tag}-{build_key(parts)}"
    final = folder / name
    if final.is_file() and os.access(final, os.X_OK):
        return BuiltBinary(final, family, True, 0.0)
    with _locked(cache_root() / f".{folder.name}.lock"):
        if final.is_file() and os.access(final, os.X_OK):  # another process built it meanwhile
            return BuiltBinary(final, family, True, 0.0)
        if echo:
            echo(f"building {name} against {package.runner.package} {package.version} "
                 f"({toolchain.cxx_version}); cached in {folder}")
        t0 = time.perf_counter()
        cache_root().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{folder.name}-", dir=cache_root()) as tmp:
            work = Path(tmp)
            write_project(work / "src", package, name, source)
            log = folder.parent / f"{folder.name}.build.log"
            log.unlink(missing_ok=True)
            cmake_build(work / "src", work / "build", toolchain, name, log=log, cmake_args=cmake_args)
            built = work / "build" / name
            if not built.is_file():
                raise BackendUnavailableError(f"building {name} produced no binary", hint=f"full log: {log}")
            build_s = time.perf_counter() - t0
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "build.json").write_text(json.dumps({**parts, "build_s": round(build_s, 1)}, indent=2, allow_nan=False) + "\n")
            install_atomically(built, final)
            log.unlink(missing_ok=True)
    return BuiltBinary(final, family, False, build_s)
