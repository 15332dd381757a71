#!/usr/bin/env bash
# The package as a user gets it (issue 38): build the wheel, check it carries the package data, install it into
# fresh venvs outside the repo and run it from a folder outside the repo, so nothing imports the source tree.
#   1. venv A: torch==2.13.0 first (the CPU build; a bare torch pulls a multi-GB CUDA build), then
#      `dist/mobilize-*.whl[runtimes] -c constraints.txt`; `mobilize --version`, `mobilize list`, and a tiny
#      `mobilize compare --plan quick`.
#   2. venv B already holds numpy 2.3.5 and pillow 12.3.0 (in range, not constraints.txt's): installing the wheel
#      alone keeps them, and the same compare runs on them (that is what tests pyproject's lower bounds).
# Takes minutes (two venvs, two compares): .ci/run calls it after the test suite.  Usage: bash scripts/check_wheel.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OLD_NUMPY=2.3.5
OLD_PILLOW=12.3.0
WORK=$(mktemp -d /tmp/mobilize-wheel.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
unset PYTHONPATH
say() { echo "check_wheel: $*"; }
start=$SECONDS

rm -f dist/mobilize-*.whl
.venv/bin/python -m pip wheel --quiet --no-deps -w dist . > "$WORK/build.log" 2>&1 \
    || { cat "$WORK/build.log" >&2; say "FAIL: building the wheel"; exit 1; }
WHEEL=$(ls dist/mobilize-*.whl)
say "built $WHEEL ($((SECONDS - start)) s)"
VERSION=$(.venv/bin/python -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')

# Every file of the package in the source tree (code and data) is in the wheel, and so is the license.
.venv/bin/python - "$WHEEL" <<'PY'
import sys
import zipfile
from pathlib import Path

names = set(zipfile.ZipFile(sys.argv[1]).namelist())
src = Path("src")
tree = {p.relative_to(src).as_posix() for p in (src / "mobilize").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
must = ["mobilize/zoo/weights/digits_mobilenet_v2.pt", "mobilize/zoo/weights/tiny_lm/config.json",
        "mobilize/zoo/weights/tiny_lm/model.safetensors", "mobilize/zoo/weights/tiny_lm/tokenizer.json",
        "mobilize/report/schema.json", "mobilize/report/html.py", "mobilize/architecture.toml",
        "mobilize/builtin_recipes/seed.yaml", "mobilize/builtin_plans/default.yaml", "mobilize/builtin_plans/quick.yaml"]
missing = sorted((tree | set(must)) - names)
for kind, pattern in [("C++ sources in native/cpp", "mobilize/native/cpp/"), ("engine C++ sources", "/cpp/")]:
    if not any(n.startswith(pattern) or (pattern.startswith("/") and pattern in n and n.startswith("mobilize/backends/"))
               for n in names):
        missing.append(kind)
if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
    missing.append("LICENSE in the dist-info")
if missing:
    sys.exit(f"check_wheel: the wheel lacks {len(missing)} file(s): " + ", ".join(missing[:20]))
data = sorted(n for n in names if n.startswith("mobilize/") and not n.endswith(".py"))
print(f"check_wheel: the wheel has all {len(tree)} files of src/mobilize ({len(data)} data files) and the LICENSE")
PY

# A fresh venv outside the repo; run from a folder outside it, and check mobilize comes from the venv.
pipq() {  # pipq VENV ARGS...: pip install, quiet; its output (less an index-location warning) only on failure
    if ! "$WORK/$1/bin/pip" install --quiet "${@:2}" > "$WORK/pip.log" 2>&1; then
        grep -v "is ignored: it is neither" "$WORK/pip.log" >&2
        say "FAIL: pip install ${*:2} in venv $1"
        exit 1
    fi
}
venv() {  # venv NAME: create it, with a current pip (the wheel's metadata is 2.4)
    python3 -m venv "$WORK/$1"
    pipq "$1" --upgrade pip
}
run_from_outside() {  # run_from_outside VENV: --version, list, a tiny compare, from $WORK/run-VENV
    local bin=$WORK/$1/bin run=$WORK/run-$1 t
    mkdir -p "$run"
    cd "$run"
    local where
    where=$("$bin/python" -c 'import mobilize; print(mobilize.__file__)')
    case $where in "$WORK/$1/"*) ;; *) say "FAIL: mobilize imported from $where, not the venv"; exit 1 ;; esac
    local version
    version=$("$bin/mobilize" --version)
    [ "$version" = "mobilize $VERSION" ] || { say "FAIL: mobilize --version printed '$version', not 'mobilize $VERSION'"; exit 1; }
    say "$1: $version, imported from $where"
    "$bin/mobilize" list > list.txt
    grep -q "zoo:tiny_lm" list.txt && grep -q "zoo:digits_mobilenet_v2" list.txt && grep -q "quick" list.txt \
        || { say "FAIL: mobilize list lacks the zoo or the plans"; cat list.txt; exit 1; }
    say "$1: mobilize list: $(wc -l < list.txt) lines"
    t=$SECONDS
    "$bin/mobilize" compare --plan quick --rounds 2 --iter 10 --accuracy-samples 16 --time-budget 5 -o "$run/out" \
        > compare.txt 2>&1 || { say "FAIL: mobilize compare --plan quick"; tail -30 compare.txt; exit 1; }
    [ -s "$run/out/report.json" ] && [ -s "$run/out/report.html" ] \
        || { say "FAIL: compare wrote no report"; tail -30 compare.txt; exit 1; }
    grep -E "^(eager-fp32|fused|torchscript-frozen) " compare.txt | cut -c1-60
    grep -E "^recommended" compare.txt || true
    say "$1: mobilize compare --plan quick: $((SECONDS - t)) s"
    cd "$REPO"
}

t=$SECONDS
venv a
pipq a "torch==2.13.0"
pipq a "$REPO/${WHEEL}[runtimes]" -c constraints.txt
say "venv a: torch==2.13.0, then the wheel with [runtimes] -c constraints.txt ($((SECONDS - t)) s)"
run_from_outside a

t=$SECONDS
venv b
pipq b "torch==2.13.0" "numpy==$OLD_NUMPY" "pillow==$OLD_PILLOW"
# The other packages at constraints.txt's versions (so the run is repeatable); numpy and pillow left to the ranges.
grep -v -i -E '^(numpy|pillow)==' constraints.txt > "$WORK/others.txt"
pipq b "$REPO/$WHEEL" -c "$WORK/others.txt"
kept=$("$WORK/b/bin/python" -c 'import numpy, PIL; print(numpy.__version__, PIL.__version__)')
[ "$kept" = "$OLD_NUMPY $OLD_PILLOW" ] \
    || { say "FAIL: installing the wheel replaced numpy $OLD_NUMPY / pillow $OLD_PILLOW with $kept"; exit 1; }
say "venv b: the wheel alone kept numpy $OLD_NUMPY and pillow $OLD_PILLOW ($((SECONDS - t)) s)"
run_from_outside b

say "ok in $((SECONDS - start)) s"
