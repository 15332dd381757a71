#!/usr/bin/env bash
# Build the arm64 (aarch64) root that `mobilize verify FILE --on arm64` and
# `mobilize compare --verify-on arm64` run in, under QEMU user emulation. Idempotent: each step
# leaves a stamp and is skipped when its stamp is there, so a second run takes seconds.
#
#   bash scripts/setup-arm64.sh            # as root; MOBILIZE_ARM64_ROOT picks the folder
#
# What it builds, from Debian's packages (qemu-user-static, debootstrap, g++-aarch64-linux-gnu) and PyPI's
# aarch64 wheels only:
#   $MOBILIZE_ARM64_ROOT (default ~/.cache/mobilize/arm64, outside the repo so a fresh clone reuses it)
#     rootfs/              debootstrap --variant=minbase bookworm arm64 (its python3 is 3.11, like the host's)
#     rootfs/opt/mobilize/site   the aarch64 wheels, each pinned to the version the host venv has
#     wheels/              the downloaded aarch64 wheels (kept: a rebuilt root does not download again)
#
# It cannot work without root (debootstrap, chroot, binfmt registration) or without binfmt_misc in the
# kernel; it says so in one line and exits 2. Heavy steps run under `nice -n 19` (shared machine).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
ROOT="${MOBILIZE_ARM64_ROOT:-$HOME/.cache/mobilize/arm64}"
RFS="$ROOT/rootfs"
WHEELS="$ROOT/wheels"
SITE="$RFS/opt/mobilize/site"
HOST_PY="${MOBILIZE_HOST_PYTHON:-$REPO/.venv/bin/python}"
SUITE=bookworm

fail() { echo "setup-arm64: cannot set up the arm64 root: $*" >&2; exit 2; }
say() { echo "setup-arm64: $*" >&2; }

# The Debian mirror the user's apt already uses (deb822 .sources files and one-line .list files; the first
# URI whose path ends in /debian, so debian-security and third-party repositories are passed over), or
# MOBILIZE_DEBIAN_MIRROR.  No host name is written in this script.
debian_mirror() {
    if [ -n "${MOBILIZE_DEBIAN_MIRROR:-}" ]; then echo "$MOBILIZE_DEBIAN_MIRROR"; return 0; fi
    local found
    found="$( { cat "${MOBILIZE_APT_ETC:-/etc/apt}"/sources.list.d/*.sources 2>/dev/null \
                  | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n'
                cat "${MOBILIZE_APT_ETC:-/etc/apt}"/sources.list "${MOBILIZE_APT_ETC:-/etc/apt}"/sources.list.d/*.list 2>/dev/null \
                  | sed -n 's/^[[:space:]]*deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p'
              } | sed 's#/*$##' | grep -E '^(https?|file)://.*/debian$' | head -1)"
    [ -n "$found" ] && echo "$found"
}

[ "$(uname -s)" = Linux ] || fail "needs Linux (QEMU user emulation through binfmt_misc); this is $(uname -s)"
[ "$(uname -m)" = x86_64 ] || fail "expects an x86_64 host; this is $(uname -m)"
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot and binfmt registration); run it with sudo"
[ -x "$HOST_PY" ] || fail "no host venv at $HOST_PY (run scripts/setup.sh first, or set MOBILIZE_HOST_PYTHON)"

# 1. Debian's qemu-user-static and debootstrap.
if ! command -v qemu-aarch64-static >/dev/null || ! command -v debootstrap >/dev/null; then
    command -v apt-get >/dev/null || fail "qemu-user-static and debootstrap are missing and there is no apt-get"
    say "installing Debian's qemu-user-static and debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static debootstrap >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 || true
             DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static debootstrap >/dev/null 2>&1; } \
        || fail "apt-get could not install qemu-user-static and debootstrap"
fi

# 1b. Debian's aarch64 cross compiler: the native benchmark and the --emit-app projects are built for aarch64
#     with it (mobilize bench --native --on arm64, optimize --emit-app DIR --target arm64).
if ! command -v aarch64-linux-gnu-g++ >/dev/null; then
    command -v apt-get >/dev/null || fail "g++-aarch64-linux-gnu is missing and there is no apt-get"
    say "installing Debian's g++-aarch64-linux-gnu"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends g++-aarch64-linux-gnu >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 || true
             DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends g++-aarch64-linux-gnu \
                 >/dev/null 2>&1; } \
        || fail "apt-get could not install g++-aarch64-linux-gnu"
fi

# 2. binfmt_misc: without systemd nothing registers Debian's qemu-aarch64 entry, so do it by hand.
#    Flag F opens the interpreter now, so it need not exist inside the chroot; P keeps argv[0]
#    (Debian's aarch64-binfmt-P name tells QEMU so).
BINFMT=/proc/sys/fs/binfmt_misc
if [ ! -e "$BINFMT/register" ]; then
    mount -t binfmt_misc binfmt_misc "$BINFMT" 2>/dev/null \
        || fail "binfmt_misc cannot be mounted at $BINFMT (a container without it, or the kernel lacks CONFIG_BINFMT_MISC)"
fi
if [ ! -e "$BINFMT/qemu-aarch64" ]; then
    entry=/usr/share/binfmts/qemu-aarch64
    [ -r "$entry" ] || fail "$entry is missing (qemu-user-static is not Debian's?)"
    field() { sed -n "s/^$1 //p" "$entry"; }
    flags=F; [ "$(field preserve)" = yes ] && flags=PF
    printf ':qemu-aarch64:M:%s:%s:%s:%s:%s' "$(field offset)" "$(field magic)" "$(field mask)" \
        "$(field interpreter)" "$flags" > "$BINFMT/register" 2>/dev/null \
        || fail "the kernel refused the qemu-aarch64 binfmt_misc entry (read-only $BINFMT?)"
    say "registered qemu-aarch64 in binfmt_misc (flags $flags)"
fi
grep -q '^enabled' "$BINFMT/qemu-aarch64" || fail "binfmt entry qemu-aarch64 exists but is disabled"

# 3. The Debian arm64 root (about 15 minutes on a loaded 2-core machine; once).
mkdir -p "$ROOT"
if [ ! -e "$RFS/.mobilize-debootstrap" ]; then
    mirror="$(debian_mirror)" || fail "no Debian mirror in this machine's apt configuration (looked for a deb entry \
whose URI ends in /debian in /etc/apt/sources.list and /etc/apt/sources.list.d/); set MOBILIZE_DEBIAN_MIRROR=URL"
    say "debootstrap $SUITE arm64 into $RFS from $mirror (log: $ROOT/debootstrap.log)"
    rm -rf "$RFS"
    nice -n 19 debootstrap --arch=arm64 --variant=minbase --include=python3,libgomp1 \
        "$SUITE" "$RFS" "$mirror" > "$ROOT/debootstrap.log" 2>&1 \
        || fail "debootstrap failed; see $ROOT/debootstrap.log"
    touch "$RFS/.mobilize-debootstrap"
fi

# 4. The aarch64 wheels, each pinned to the version the host venv has (its local "+cpu" dropped).
#    torch 2.13.0's only aarch64 wheel on PyPI is a CUDA build: libtorch_cuda.so is a load-time
#    dependency of torch._C (and of ExecuTorch's pybindings), so the CUDA runtime wheels its metadata
#    names are installed too. They are never called (no GPU under QEMU); they only let the dynamic
#    linker finish (about 1.9 GB of the 2.4 GB downloaded). nvidia-nccl-cu13==2.29.7, the version
#    torch names, has no aarch64 wheel on the index: 2.32.3 gives the same libnccl.so.2 (2.27.7 lacks
#    ncclCommResume, which libtorch_cuda.so links against).
RUNTIME_PINS="torch executorch onnxruntime numpy pyyaml flatbuffers packaging protobuf sympy mpmath
    typing_extensions filelock networkx jinja2 markupsafe fsspec ruamel.yaml tabulate ai-edge-litert openvino
    openvino-telemetry"
CUDA_PINS="nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.1.1.3 nvidia-cufft==12.0.0.61 nvidia-cufile==1.15.1.6
    nvidia-curand==10.4.0.35 nvidia-cusparse==12.6.3.3 nvidia-nvjitlink==13.5.37 nvidia-cuda-nvrtc==13.0.88
    nvidia-cuda-cupti==13.0.85 nvidia-cusolver==12.0.4.66 nvidia-nvtx==13.0.85
    nvidia-cudnn-cu13==9.20.0.48 nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.4.5 nvidia-nccl-cu13==2.32.3"
pins="$("$HOST_PY" - $RUNTIME_PINS <<'PY'
import importlib.metadata as md, sys
for name in sys.argv[1:]:
    try:
        print(f"{name}=={md.version(name).split('+')[0]}")
    except md.PackageNotFoundError:
        pass  # not in the host venv (an optional runtime): not in the arm64 root either
PY
) $CUDA_PINS"
pins="$(echo $pins | tr ' ' '\n' | sort | tr '\n' ' ')"
PLATFORMS="--platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux_2_25_aarch64
    --platform manylinux_2_27_aarch64 --platform manylinux_2_28_aarch64 --platform manylinux_2_35_aarch64"
PIPX=("$HOST_PY" -m pip --disable-pip-version-check -q)
TAGS=(--only-binary=:all: --no-deps $PLATFORMS --python-version 3.11 --implementation cp --abi cp311)
if [ "$(cat "$SITE/.mobilize-pins" 2>/dev/null)" != "$pins" ]; then
    mkdir -p "$WHEELS"
    say "downloading the aarch64 wheels into $WHEELS (log: $ROOT/pip.log): $pins"
    # shellcheck disable=SC2086
    nice -n 19 "${PIPX[@]}" download "${TAGS[@]}" -d "$WHEELS" --find-links "$WHEELS" $pins > "$ROOT/pip.log" 2>&1 \
        || fail "pip could not download the aarch64 wheels; see $ROOT/pip.log"
    say "installing them into $SITE"
    rm -rf "$SITE.tmp"
    # shellcheck disable=SC2086
    nice -n 19 "${PIPX[@]}" install "${TAGS[@]}" --no-index --find-links "$WHEELS" --target "$SITE.tmp" $pins \
        >> "$ROOT/pip.log" 2>&1 || fail "pip could not install the aarch64 wheels; see $ROOT/pip.log"
    rm -rf "$SITE" && mv "$SITE.tmp" "$SITE"
    echo "$pins" > "$SITE/.mobilize-pins"
fi

# 5. The check: the root's python imports the runtimes on (emulated) aarch64, the way mobilize runs it:
#    in a private mount namespace with /proc mounted and no /sys (onnxruntime's cpuinfo segfaults under
#    QEMU when /sys is there), so nothing stays mounted in the cache.
if [ "$(cat "$SITE/.mobilize-checked" 2>/dev/null)" = "$pins" ]; then
    say "ready (checked when built; delete $SITE/.mobilize-checked to check again)"
    exit 0
fi
unshare --mount --propagation private -- sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$RFS" \
    /usr/bin/env -i PYTHONPATH=/opt/mobilize/site PYTHONNOUSERSITE=1 /usr/bin/python3 -c '
import importlib, platform
assert platform.machine() == "aarch64", platform.machine()
found, broken = [], []
for name in ("numpy", "torch", "executorch.runtime", "onnxruntime", "openvino", "ai_edge_litert.interpreter"):
    short = name.split(".")[0]
    try:
        importlib.import_module(name)
        found.append(short)
    except Exception as exc:
        why = (str(exc).splitlines() or [""])[0][:120]
        found.append(f"{short} (does not import: {type(exc).__name__}: {why})")
        broken += [short] if short in ("numpy", "torch", "executorch", "onnxruntime") else []
print("setup-arm64:", "ready" if not broken else "NOT ready", "on", platform.machine(), "with", ", ".join(found))
raise SystemExit(3 if broken else 0)
' 2> "$ROOT/check.log" || fail "the arm64 root cannot run torch, executorch, onnxruntime and numpy; see above and $ROOT/check.log"
echo "$pins" > "$SITE/.mobilize-checked"
