#!/usr/bin/env bash
# Install the llama.cpp engine's tools into .venv: llama-cpp-python (libllama, built from its sdist) and
# llama.cpp's own GGUF converter (convert_hf_to_gguf.py with its `conversion` package and gguf-py, from the same
# sdist, so converter and runtime agree on the file format). Optional, like the arm64 root: without it the llamacpp
# variants are refused in one line naming this script. Idempotent and cached outside the repo, so a fresh clone
# reuses the build:
#
#   bash scripts/setup-llamacpp.sh        # MOBILIZE_LLAMACPP_CACHE picks the cache folder
#
#   $MOBILIZE_LLAMACPP_CACHE (default ~/.cache/mobilize/llamacpp)
#     llama_cpp_python-VERSION.tar.gz          the sdist (downloaded once)
#     VERSION-CPUKEY/llama_cpp_python-*.whl    the wheel built for this CPU (GGML_NATIVE: llama.cpp's own default,
#                                              its kernels picked for the CPU it is built on; CPUKEY hashes the
#                                              CPU's flags so another CPU gets its own build, never a wheel that
#                                              would die on an instruction it lacks)
#
# CPUKEY also hashes the build's options. The first build takes 4 min on 2 quiet Zen 4 cores (~15 min on 2 loaded
# ones: libllama and ggml; the multimodal library, tests, examples, tools and server are not built); later runs take
# seconds. Heavy steps run under `nice -n 19`.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
VERSION=0.3.36
CACHE="${MOBILIZE_LLAMACPP_CACHE:-$HOME/.cache/mobilize/llamacpp}"
PY="$REPO/.venv/bin/python"
SHARE="$REPO/.venv/share/llama.cpp"

fail() { echo "setup-llamacpp: cannot install llama.cpp: $*" >&2; exit 2; }
say() { echo "setup-llamacpp: $*" >&2; }

[ -x "$PY" ] || fail "no venv at $PY (run scripts/setup.sh first)"
command -v cmake >/dev/null || fail "cmake is missing (apt-get install cmake)"
command -v g++ >/dev/null || fail "g++ is missing (apt-get install g++)"

# GGML_OPENMP=OFF: ggml's own threadpool, as on Android. With OpenMP, ggml shares the process's libgomp with torch
# and ExecuTorch, and its decode took 1.4-3 ms a token instead of 0.2 once ExecuTorch had run in the same process
# (or under OMP_WAIT_POLICY=passive): its speed would depend on what else the process had run.
BUILD_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DGGML_OPENMP=OFF"
# On an x86 CPU with AMX, ggml's AMX kernels are left out of the build (-mno-amx-*: GCC lets an explicit -mno-X win over
# -march=native whatever their order): with this llama.cpp the AMX extra buffer type crashed every quantized GGUF on an
# Intel Xeon with AMX (SIGSEGV for Q4_0/Q4_K_M, SIGILL for Q8_0, llama.cpp issue #20824; the tile-data permission is
# asked on the main thread only and the tile config can be optimised away, llama.cpp PR #26954). The AVX-512/VNNI
# repack path (CPU_REPACK) stays: the same files decode correctly there with it. Other CPUs build as before; the
# flags are part of CPUKEY, so an AMX machine's earlier (crashing) build is not reused.
# The flags reach the compiler as CFLAGS/CXXFLAGS (CMake's initial CMAKE_C_FLAGS/CMAKE_CXX_FLAGS).
NO_AMX=""
if grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | grep -qw amx_tile; then
    NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
CPUKEY=$( { (grep -m1 '^flags' /proc/cpuinfo || uname -m) | tr ' ' '\n' | sort; echo "$BUILD_ARGS"; [ -z "$NO_AMX" ] || echo "$NO_AMX"; } \
    | sha256sum | cut -c1-12)
have() {
    "$PY" - "$VERSION" "$SHARE" "$CPUKEY" <<'EOF' 2>/dev/null
import importlib.metadata, pathlib, sys
assert importlib.metadata.version("llama_cpp_python") == sys.argv[1]
assert (pathlib.Path(sys.argv[2]) / "convert_hf_to_gguf.py").is_file()
assert (pathlib.Path(sys.argv[2]) / "CPUKEY").read_text().strip() == sys.argv[3]  # built for this CPU
import llama_cpp, gguf  # noqa: F401  (libllama loads on this CPU; gguf-py reads the files' tensor types)
EOF
}
if have; then say "llama-cpp-python $VERSION and llama.cpp's converter are installed"; exit 0; fi

mkdir -p "$CACHE"
SDIST="$CACHE/llama_cpp_python-$VERSION.tar.gz"
if [ ! -s "$SDIST" ]; then
    say "downloading the llama-cpp-python $VERSION sdist"
    tmp=$(mktemp -d)
    "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp" \
        || fail "pip could not download llama-cpp-python==$VERSION"
    mv "$tmp"/llama_cpp_python-"$VERSION".tar.gz "$SDIST"
    rm -rf "$tmp"
fi

WHEELDIR="$CACHE/$VERSION-$CPUKEY"
if ! ls "$WHEELDIR"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    say "building libllama for this CPU (4-15 min on 2 cores; cached in $WHEELDIR)"
    mkdir -p "$WHEELDIR.tmp"
    CMAKE_ARGS="$BUILD_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" CFLAGS="${CFLAGS:-} $NO_AMX" CXXFLAGS="${CXXFLAGS:-} $NO_AMX" \
        nice -n 19 "$PY" -m pip wheel -q --no-deps "$SDIST" -w "$WHEELDIR.tmp" > "$CACHE/build.log" 2>&1 \
        || { tail -20 "$CACHE/build.log" >&2; fail "the build failed (log: $CACHE/build.log)"; }
    rm -rf "$WHEELDIR"; mv "$WHEELDIR.tmp" "$WHEELDIR"
fi
"$PY" -m pip install -q --no-deps --force-reinstall "$WHEELDIR"/llama_cpp_python-*.whl \
    || fail "pip could not install the wheel in $WHEELDIR"
# llama-cpp-python's own run-time dependencies (no torch, nothing that moves .venv's pins)
"$PY" -m pip install -q "diskcache>=5.6.1" "jinja2>=2.11.3" "typing-extensions>=4.5.0" \
    || fail "pip could not install llama-cpp-python's dependencies"

# llama.cpp's converter from the same sdist: the script, its `conversion` package and gguf-py (the script puts its
# own gguf-py first on sys.path), under .venv/share/llama.cpp where the engine looks for it.
tmp=$(mktemp -d)
tar xzf "$SDIST" -C "$tmp" "llama_cpp_python-$VERSION/vendor/llama.cpp/convert_hf_to_gguf.py" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/conversion" "llama_cpp_python-$VERSION/vendor/llama.cpp/gguf-py" \
    || fail "the sdist has no convert_hf_to_gguf.py"
rm -rf "$SHARE"; mkdir -p "$(dirname "$SHARE")"
mv "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$SHARE"
rm -rf "$tmp"
# gguf-py from the same sdist into .venv (the engine reads the files' tensor types and sizes with it)
"$PY" -m pip install -q --no-deps "$SHARE/gguf-py" || fail "pip could not install llama.cpp's gguf-py"
echo "$CPUKEY" > "$SHARE/CPUKEY"
have || fail "llama_cpp does not import after the install (see $CACHE/build.log)"
say "llama-cpp-python $VERSION and llama.cpp's converter installed in .venv"
