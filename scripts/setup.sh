#!/usr/bin/env bash
# Create .venv in the repo root and install mobilize with its pinned dependencies (idempotent).
# torch==2.13.0 is the CPU build; never let pip resolve a newer torch (that is a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if ! .venv/bin/python -c "import mobilize, torch, executorch, onnxruntime, pytest" 2>/dev/null \
   || [ pyproject.toml -nt .venv/.mobilize-installed ]; then
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet "torch==2.13.0"
    .venv/bin/pip install --quiet -e ".[test]"
    touch .venv/.mobilize-installed
fi
