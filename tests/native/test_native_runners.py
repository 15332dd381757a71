"""Every engine's native runner (``Backend.native``), checked from the registry: its C++ files are where it
says, every header its programs include is copied beside them, its runtimes are the engine's own; and the
engine-free parts of the native runner (``mobilize/native``, ``mobilize/arm64/native.py``) name no engine."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import mobilize
from mobilize.core.backend import default_runtime, entries
from mobilize.core.native_runner import NativeRunner
from mobilize.native.build import CPP_DIR, runner_for_format, runners, source_path

NATIVE_FORMATS = sorted(entries("native"))
INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)
WRITTEN = {"model_info.h"}
"""Headers an emitted app is written with (not shipped)."""


def test_the_native_formats_are_the_ones_with_a_cpp_runtime():
    assert NATIVE_FORMATS == ["executorch", "lite", "torchscript"]
    assert sorted(runners()) == ["executorch", "torch"]
    assert runner_for_format("onnx") is None


@pytest.mark.parametrize("fmt", NATIVE_FORMATS)
def test_runner_files_and_runtimes(fmt):
    backend, _ = entries("native")[fmt]
    runner = runner_for_format(fmt)
    assert isinstance(runner, NativeRunner)
    assert runner.sources_dir == Path(mobilize.__file__).parent / "backends" / backend.name / "cpp"
    for name in (runner.bench_source, runner.app_source, runner.cmake_template):
        assert (runner.sources_dir / name).is_file(), name  # the engine's own files live in its folder
    assert f"@{runner.cmake_root_var}@" in (runner.sources_dir / runner.cmake_template).read_text()
    assert default_runtime(fmt) in runner.runtime_args
    assert set(runner.runtime_args) <= set(backend.runtimes)
    assert set(runner.app_defines) <= set(runner.runtime_args)
    assert set(runner.cross_optional) <= set(runner.required_files)


@pytest.mark.parametrize("family", ["executorch", "torch"])
def test_every_included_header_is_copied_beside_the_program(family):
    runner = runners()[family]
    for program, headers in ((runner.bench_source, runner.bench_headers), (runner.app_source, runner.app_headers)):
        todo, seen = [program], set()
        while todo:
            name = todo.pop()
            text = source_path(runner, name).read_text()
            for inc in INCLUDE.findall(text):
                if inc not in WRITTEN and inc not in seen:
                    seen.add(inc)
                    todo.append(inc)
        assert seen <= set(headers), (program, seen - set(headers))
        assert all(source_path(runner, h).is_file() for h in headers)


def test_shared_headers_stay_shared():
    """Engine sources live in the engine's folder; the shared folder holds no engine's program."""
    assert sorted(p.name for p in CPP_DIR.iterdir()) == [
        "bench_common.h", "camera_convert.h", "frame_loop.h", "tensor_file.h", "toolchain-aarch64.cmake"]


def engine_names() -> set[str]:
    return ({b.name for b, _ in entries("native").values()} | set(NATIVE_FORMATS) | set(runners())
            | {r.package for r in runners().values()})


def named_engines(source: str, names: set[str]) -> list[str]:
    """``line: text`` of every comparison, membership test or dict key that is an engine name."""
    found = []

    def constants(node: ast.AST) -> list[str]:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            values = [v for side in (node.left, *node.comparators) for v in constants(side)]
        elif isinstance(node, ast.Dict):
            values = [v for key in node.keys if key is not None for v in constants(key)]
        else:
            continue
        found += [f"{node.lineno}: {ast.get_source_segment(source, node)}" for v in values if v in names][:1]
    return found


def test_the_native_runner_names_no_engine():
    root = Path(mobilize.__file__).parent
    files = [*sorted((root / "native").glob("*.py")), root / "arm64" / "native.py"]
    names = engine_names()
    assert {"executorch", "torch", "torchscript", "lite"} <= names
    found = {str(f.relative_to(root)): hits for f in files if (hits := named_engines(f.read_text(), names))}
    assert not found, found


def test_the_guard_catches_a_planted_comparison():
    names = engine_names()
    assert named_engines('if fmt == "executorch":\n    pass\n', names)
    assert named_engines('x = runtime in ("lite", "torchscript")\n', names)
    assert named_engines('F = {"torch": 1}\n', names)
    assert not named_engines('if runner.frames:\n    pass\n', names)
