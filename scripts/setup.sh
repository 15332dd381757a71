#!/usr/bin/env bash
# Create .venv in the repo root and install mobilize with every extra, at the exact versions CI tests
# (constraints.txt; pyproject.toml holds the ranges) (idempotent).
# torch==2.13.0 is the CPU build; never let pip resolve a newer torch (that is a multi-GB CUDA build).
# Also installs Debian's chromium when absent (the HTML report is checked in a real browser by the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if ! { .venv/bin/python -c "import mobilize, torch, executorch, onnxruntime, tqdm, pytest, xdist, openvino, ray, torch_pruning, mkdocstrings, material" 2>/dev/null && [ -x .venv/bin/ruff ] && [ -x .venv/bin/mkdocs ]; } \
   || [ pyproject.toml -nt .venv/.mobilize-installed ] || [ constraints.txt -nt .venv/.mobilize-installed ]; then
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet "torch==2.13.0"
    .venv/bin/pip install --quiet -e ".[test,runtimes,compress,sweep,docs]" -c constraints.txt
    # OpenVINO sends usage telemetry unless opted out; mobilize never asks for it.
    .venv/bin/opt_in_out --opt_out >/dev/null 2>&1 || true
    touch .venv/.mobilize-installed
fi
# .venv/bin/mobilize as a small native launcher that starts Python with SIGINT/SIGTERM blocked until mobilize's
# handler is in place (scripts/mobilize-launcher.c); pip's Python script where no C compiler is found.
if command -v cc >/dev/null 2>&1 && { ! head -c 4 .venv/bin/mobilize | grep -q ELF || [ scripts/mobilize-launcher.c -nt .venv/bin/mobilize ]; }; then
    cc -O2 -Wall -o .venv/bin/mobilize.new -DPYTHON="\"$PWD/.venv/bin/python\"" scripts/mobilize-launcher.c \
        && mv .venv/bin/mobilize.new .venv/bin/mobilize
fi
# OpenSSH's server for the device tests (issue #64): they start it themselves on 127.0.0.1 on a free port with keys
# in a temp folder, and stop it; installing it starts no server here (no init system runs one in a container)
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's openssh-server for the loopback device tests" >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openssh-server >/dev/null 2>&1; then
        apt-get update -q >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openssh-server >/dev/null 2>&1 \
            || echo "setup: could not install openssh-server; the device tests will say so and not run" >&2
    fi
fi
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's chromium for the browser test of report.html" >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; then
        apt-get update -q >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 \
            || echo "setup: could not install chromium; the browser test of report.html will say so" >&2
    fi
fi
