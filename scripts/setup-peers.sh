#!/usr/bin/env bash
# The field's own export CLIs that pin other versions than .venv (so never installed in it), each in its own venv:
#   optimum-executorch (optimum-cli export executorch): pins transformers 5.0.0rc1
#   optimum-intel      (optimum-cli export openvino):   pins transformers < 5.6, huggingface-hub < 1.22, torchvision
# Optional, like setup-llamacpp.sh: the generation plan's `optimum-*` variants (peers' files, built by these CLIs and
# run by mobilize's sessions) are left out with a one-line reason where a venv is absent; benchmarks/llm.py and
# benchmarks/llm_shapes.py time them beside mobilize's files. Idempotent, cached outside the repo:
#
#   bash scripts/setup-peers.sh [optimum-executorch] [optimum-intel]    # default: both
#   $MOBILIZE_PEERS_DIR (default ~/.cache/mobilize/peers)/TOOL          one venv per tool
#
# torch is pinned to .venv's CPU build (2.13.0) in each: an unpinned resolve would pull a multi-GB CUDA build.
# optimum-intel is installed without its torchvision requirement (no torchvision wheel imports beside this torch;
# its causal-LM export does not use it). About 2 min per tool from a warm pip cache. Heavy steps run under nice.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS="${MOBILIZE_PEERS_DIR:-$HOME/.cache/mobilize/peers}"
PYTHON="${PYTHON:-python3}"
TORCH="torch==2.13.0"

fail() { echo "setup-peers: cannot install $1: $2" >&2; exit 2; }
say() { echo "setup-peers: $*" >&2; }

# tool -> pip requirement lines (after torch); the stamp file records them, a change reinstalls
declare -A REQS=(
    [optimum-executorch]="optimum-executorch==1.1.0 executorch==1.5.1 transformers==5.0.0rc1"
    [optimum-intel]="optimum==2.3.0 transformers==5.5.4 huggingface-hub<1.22,>=0.23.2 nncf==3.4.0 openvino==2026.4.1 openvino-tokenizers==2026.4.1.0 openvino-genai==2026.4.1.0 setuptools requests<3.0,>=2.33 accelerate"
)
declare -A NODEPS=(
    [optimum-intel]="optimum-intel==2.2.0"
)
declare -A CHECK=(
    [optimum-executorch]="import optimum.exporters.executorch, executorch, transformers"
    [optimum-intel]="import optimum.intel, optimum.exporters.openvino, openvino, openvino_genai, nncf, transformers"
)

install() {
    local tool="$1" venv="$PEERS/$1"
    local stamp="$TORCH ${REQS[$tool]} ${NODEPS[$tool]:-}"
    if [ -x "$venv/bin/optimum-cli" ] && [ "$(cat "$venv/.mobilize-peer" 2>/dev/null)" = "$stamp" ] \
        && "$venv/bin/python" -c "${CHECK[$tool]}" 2>/dev/null; then
        say "$tool is installed ($venv)"; return
    fi
    say "installing $tool into $venv (its own venv: it pins versions .venv cannot take)"
    rm -rf "$venv"  # no stamp: absent or half-installed (an interrupted run); the stamp is written last
    "$PYTHON" -m venv "$venv" || fail "$tool" "$PYTHON -m venv failed"
    local pip=("$venv/bin/python" -m pip install -q)
    local log="$PEERS/$tool.log"
    {
        nice -n 19 "${pip[@]}" --upgrade pip \
        && nice -n 19 "${pip[@]}" "$TORCH" \
        && nice -n 19 "${pip[@]}" "$TORCH" ${REQS[$tool]} \
        && { [ -z "${NODEPS[$tool]:-}" ] || nice -n 19 "${pip[@]}" --no-deps ${NODEPS[$tool]}; }
    } > "$log" 2>&1 || { tail -15 "$log" >&2; fail "$tool" "pip failed (log: $log)"; }
    "$venv/bin/python" -c "${CHECK[$tool]}" >> "$log" 2>&1 \
        || { tail -15 "$log" >&2; fail "$tool" "it does not import (log: $log)"; }
    "$venv/bin/optimum-cli" --help >> "$log" 2>&1 || fail "$tool" "its optimum-cli does not start (log: $log)"
    echo "$stamp" > "$venv/.mobilize-peer"
    say "$tool installed ($venv)"
}

mkdir -p "$PEERS"
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(optimum-executorch optimum-intel)
for tool in "${tools[@]}"; do
    [ -n "${REQS[$tool]:-}" ] || fail "$tool" "unknown tool (optimum-executorch, optimum-intel)"
    install "$tool"
done
