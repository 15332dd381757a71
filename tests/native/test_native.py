"""Native runners: artifacts of zoo models timed from C++ give the Python runtimes' outputs, the
build is cached, missing toolchain pieces are one-line refusals, and the emitted apps build with
CMake and print the expected top-1 for a bundled digits sample.

The ExecuTorch binary builds in ~10 s (2 cores) and its tests run by default; the LibTorch binary
and the three app projects take ~90 s more cold, so those tests are marked slow.  Binaries live in
the on-disk cache (``$MOBILIZE_CACHE_DIR/native``), so only the first run on a machine pays.
"""

from __future__ import annotations

import dataclasses

import json
import re
import subprocess

import pytest
import torch

from mobilize.api import bench
from mobilize.bench.harness import BenchConfig
from mobilize.core.errors import BackendUnavailableError, ConfigError, UserError
from mobilize.native import build as native_build
from mobilize.native.runner import bench_native
from mobilize.native.tensorfile import read_tensors, write_tensors
from mobilize.pipeline.recipe import Recipe
from mobilize.core.inputs import InputSpec

SPEC = InputSpec((1, 3, 32, 32))
QUICK = BenchConfig(warmup=1, iterations=3)
MAIN_LINE = re.compile(r"^Main run finished\. Microseconds per iter: [0-9.]+\. Iters per second: [0-9.]+$", re.M)


@pytest.fixture(scope="session")
def conv_pte(tmp_path_factory) -> str:
    """zoo:conv_bn_relu at 32x32 as a .pte: its output is channels-last and one op runs on the
    portable kernels, so the native runtime's layout handling and kernel library are exercised.
    (Not bundled: ExecuTorch's own bundled-output check aborts the process on its channels-last
    output, in the exporter's verification.)"""
    from mobilize.api import optimize

    recipe = Recipe.from_dict({"name": "native-test", "passes": ["fuse"], "exports": ["executorch"]})
    result = optimize("zoo:conv_bn_relu", recipe, out_dir=tmp_path_factory.mktemp("conv"), input_specs=[SPEC])
    return result["artifacts"][0]["artifact"]


@pytest.fixture(scope="session")
def digits(tmp_path_factory) -> dict:
    """zoo:digits_mobilenet_v2 (trained) as .pt, .ptl, .pte and .bpte, each with real digits samples
    bundled, written by ``mobilize optimize --emit-app`` with an app project per format."""
    from mobilize.cli.main import main as cli_main

    tmp = tmp_path_factory.mktemp("digits")
    recipe = tmp / "r.yaml"
    recipe.write_text("name: app-test\npasses: [fuse]\nexports:\n"
                      "  - torchscript: {optimize: none, bundled_inputs: true}\n"
                      "  - lite: {optimize: none, bundled_inputs: true}\n"
                      "  - executorch: {bundle: true, bundle_samples: 2}\n")
    code = cli_main(["optimize", "zoo:digits_mobilenet_v2", "--recipe", str(recipe), "--data", "digits",
                     "-o", str(tmp / "out"), "--emit-app", str(tmp / "apps"), "--json", str(tmp / "o.json")])
    assert code == 0
    result = json.loads((tmp / "o.json").read_text())
    paths = {a["format"]: a["artifact"] for a in result["artifacts"]}
    paths["bpte"] = paths["executorch"][:-4] + ".bpte"
    return {**paths, "apps": result["apps"]}


@pytest.fixture(scope="session")
def et_binary():
    return native_build.build_binary("executorch")


@pytest.fixture(scope="session")
def torch_binary():
    return native_build.build_binary("torch")


def both(path: str, **kw) -> tuple[dict, dict]:
    """The same benchmark through the Python harness and the native runner (1 thread both)."""
    quiet = lambda line: None  # noqa: E731
    config = dataclasses.replace(QUICK, threads=1, **{k: tuple(v) if k == 'input_specs' else v for k, v in kw.items()})
    python = bench(path, config, echo=quiet)
    native = bench_native(path, config, echo=quiet)
    return python, native


def assert_same_outputs(python: dict, native: dict) -> None:
    # Same runtime, same kernels, one thread on both sides: equal to float rounding.
    assert len(python["_outputs"]) == len(native["_outputs"]) > 0
    for p, n in zip(python["_outputs"], native["_outputs"]):
        assert p.shape == n.shape and p.dtype == n.dtype
        torch.testing.assert_close(n, p.contiguous(), atol=1e-6, rtol=1e-6)


def assert_same_report(python: dict, native: dict) -> None:
    assert native["runner"] == "native" and native["runtime"] == python["runtime"]
    assert set(python) - set(native) == set(), set(python) - set(native)
    for key in ("format", "threads", "input_source", "input_specs", "size_bytes", "iterations", "warmup"):
        assert native[key] == python[key], key
    assert 0 < native["latency_ms_min"] <= native["latency_ms_p50"] <= native["latency_ms_max"]
    assert native["peak_rss_mb"] > 0 and native["load_ms"] > 0


# -- default suite: cheap ----------------------------------------------------------------------

def test_tensor_file_round_trip(tmp_path):
    tensors = [torch.randn(1, 3, 4, 5).contiguous(memory_format=torch.channels_last),
               torch.arange(6, dtype=torch.int64).reshape(2, 3), torch.tensor(True), torch.zeros(0, 3)]
    write_tensors(tmp_path / "t.mbt", tensors)
    back = read_tensors(tmp_path / "t.mbt")
    assert [t.dtype for t in back] == [t.dtype for t in tensors]
    for a, b in zip(tensors, back):
        assert torch.equal(a, b)


def test_missing_compiler_is_a_one_line_refusal(run_cli, conv_pte, monkeypatch, tmp_path):
    monkeypatch.setenv("MOBILIZE_CXX", str(tmp_path / "no-such-g++"))
    monkeypatch.setenv("MOBILIZE_CACHE_DIR", str(tmp_path / "cache"))
    code, out, err = run_cli("bench", "--native", conv_pte, "--iter", "2")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "C++17 compiler" in lines[0] and "no-such-g++" in lines[0] and "$MOBILIZE_CXX" in lines[0]
    assert "apt-get install g++" in lines[0]
    assert not (tmp_path / "cache").exists()


def test_missing_cmake_and_missing_headers_are_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("MOBILIZE_CMAKE", str(tmp_path / "no-cmake"))
    with pytest.raises(BackendUnavailableError, match="CMake 3.19 or newer.*pip install cmake"):
        native_build.find_toolchain()
    runner = native_build.runner_named("executorch")
    stripped = dataclasses.replace(runner, required_files=(*runner.required_files, "include/executorch/nope.h"))
    with pytest.raises(BackendUnavailableError) as info:
        native_build.find_package(stripped)
    assert "missing include/executorch/nope.h" in str(info.value) and "wheel" in str(info.value)
    assert "\n" not in str(info.value)


def test_build_is_cached_and_installed_atomically(et_binary):
    again = native_build.build_binary("executorch")
    assert again.cached and again.path == et_binary.path and again.build_s == 0.0
    facts = json.loads((et_binary.path.parent / "build.json").read_text())
    assert facts["package"].startswith("executorch==") and "sources" in facts
    folder = et_binary.path.parent
    assert not [p for p in folder.parent.glob(f".{folder.name}-*") if p.is_dir()]  # no temp build left behind
    assert not list(et_binary.path.parent.glob(".bench_executorch.*"))  # no half-installed binary


def test_executorch_binary_registers_xnnpack(et_binary, conv_pte):
    done = subprocess.run([str(et_binary.path), "--model", conv_pte, "--describe_inputs"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "XnnpackBackend" in re.search(r"#mobilize backends (.*)", done.stdout).group(1).split(",")
    assert "#mobilize declared 0 shape=1,3,32,32 dtype=float32" in done.stdout


def test_executorch_native_matches_python(et_binary, conv_pte):
    python, native = both(conv_pte)  # seeded random input, as the Python harness makes it
    assert native["input_source"] == "random-with-seed:0"
    assert_same_report(python, native)
    assert_same_outputs(python, native)
    assert native["native"]["registered_backends"] and native["delegation"] == python["delegation"]

    python, native = both(conv_pte, data="digits")
    assert native["input_source"] == "data:digits"
    assert_same_outputs(python, native)


def test_cli_bench_native_prints_original_lines_and_json(run_cli, et_binary, conv_pte, tmp_path):
    code, out, err = run_cli("bench", "--native", conv_pte, "--iter", "5", "--warmup", "1", "--threads", "1",
                             "--report_pep", "--print_output", "--json", tmp_path / "r.json")
    assert code == 0, err
    for line in ("Starting benchmark.", "Running warmup runs.", "Main runs."):
        assert line in out.splitlines()
    assert MAIN_LINE.search(out) and out.count("PyTorchObserver") == 5
    assert "Output 0: tensor(" in out and "#mobilize" not in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["runner"] == "native" and report["iterations"] == 5 and report["threads"] == 1
    assert report["runtime"] == "executorch" and report["latency_ms_p50"] > 0


def test_native_failures_name_their_cause(et_binary, conv_pte):
    quiet = lambda line: None  # noqa: E731
    with pytest.raises(UserError, match=r"Expected shape \(1, 3, 32, 32\), but received \(1, 3, 16, 16\)") as info:
        bench_native(conv_pte, dataclasses.replace(QUICK, input_specs=(InputSpec((1, 3, 16, 16)),), threads=1), echo=quiet)
    assert info.value.stage == "run"
    with pytest.raises(ConfigError, match="has no bundled inputs"):
        bench_native(conv_pte, dataclasses.replace(QUICK, bundled_input=0, threads=1), echo=quiet)


def test_emit_app_writes_a_cmake_project_per_native_format(conv_pte, artifacts, tmp_path):
    from mobilize.native.app import emit_apps

    entries = [{"artifact": conv_pte, "format": "executorch"}, {"artifact": str(artifacts["onnx"]), "format": "onnx"}]
    apps, notes = emit_apps(entries, tmp_path / "apps", data="digits")
    assert len(apps) == 1 and len(notes) == 1 and "no native app for tiny.onnx" in notes[0]
    app = apps[0]
    assert sorted(p.name for p in app.folder.iterdir()) == [
        "CMakeLists.txt", "README.md", "bpte.h", "camera_convert.h", "frame.nv21", "frame_loop.h", "input.raw",
        "main.cpp", "model_info.h", "tensor_file.h"]
    cmake = (app.folder / "CMakeLists.txt").read_text()
    assert "find_package(executorch" in cmake and "android.toolchain.cmake" in cmake and "iOS" in cmake
    assert str(native_build.find_package("executorch").root) in cmake and "@" not in cmake.replace("@loader", "")
    info = (app.folder / "model_info.h").read_text()
    assert "#define MOBILIZE_INPUT_DIMS {1, 3, 32, 32}" in info and conv_pte in info
    assert (app.folder / "input.raw").stat().st_size == 3 * 32 * 32 * 4 and app.input_source == "data:digits"
    assert (app.folder / "frame.nv21").stat().st_size == 640 * 480 * 3 // 2  # app --frame: the sample in a frame
    assert 'MOBILIZE_FRAME_CONFIG "width=640 height=480 layout=nv21 ' in info


def test_native_refuses_formats_it_cannot_run(run_cli, artifacts):
    code, _, err = run_cli("bench", "--native", artifacts["onnx"])
    assert code == 2 and "--native runs TorchScript (.pt), lite (.ptl) and ExecuTorch" in err


# -- slow: the LibTorch build, the app projects and a trained model ------------------------------

@pytest.mark.slow
def test_torchscript_and_lite_native_match_python(torch_binary, digits):
    for fmt in ("torchscript", "lite"):
        python, native = both(digits[fmt], bundled_input=0)  # read by LibTorch from the file
        assert native["input_source"] == "bundled:0" and native["input_specs"] == python["input_specs"]
        assert_same_report(python, native)
        assert_same_outputs(python, native)
        python, native = both(digits[fmt], seed=3)  # the manifest's input spec, seeded as in Python
        assert native["input_source"] == "random-with-seed:3"
        assert_same_outputs(python, native)


@pytest.mark.slow
def test_bundled_program_inputs_are_read_natively(et_binary, digits):
    for index in (0, 1):
        python, native = both(digits["bpte"], bundled_input=index)
        assert native["input_source"] == f"bundled:{index}"
        assert native["input_specs"] == python["input_specs"] == [{"shape": [1, 3, 96, 96], "dtype": "float",
                                                                   "memory_format": "contiguous_format"}]
        assert_same_outputs(python, native)
    with pytest.raises(ConfigError, match="out of range: the file bundles 2 input"):
        bench_native(digits["bpte"], dataclasses.replace(QUICK, bundled_input=2, threads=1), echo=lambda line: None)


def app_top1(binary, *args) -> tuple[int, str]:
    done = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(re.search(r"^top-1: (\d+)$", done.stdout, re.M).group(1)), done.stdout


@pytest.mark.slow
def test_emitted_apps_build_and_print_the_expected_top1(digits):
    """Each app is built with CMake and run: with no arguments it feeds the file's bundled digit,
    with ``input.raw`` the first digits sample; both top-1s match the Python runtime, and the
    trained model names the real digit."""
    from mobilize.runtimes.base import open_session
    from mobilize.sources.data import open_data
    from mobilize.sources.models import resolve_model

    assert sorted(a["format"] for a in digits["apps"]) == ["executorch", "lite", "torchscript"]
    x, y = next(iter(open_data("digits").batches(InputSpec((1, 3, 96, 96)), limit=1)))
    for app in digits["apps"]:
        assert app["input_source"] == "data:digits"
        done = subprocess.run(app["build"], shell=True, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        with open_session(resolve_model(app["artifact"]), threads=1) as session:
            expected_bundled = int(session.run(session.bundled_inputs()[0])[0].argmax())
            expected_raw = int(session.run([x])[0].argmax())
        top1, text = app_top1(app["run"])  # no arguments: the bundled sample
        assert "input: bundled input 0" in text and top1 == expected_bundled, text
        if app["format"] == "executorch":
            assert app["artifact"].endswith(".bpte") and f"bundled expected top-1: {expected_bundled}" in text
        top1, text = app_top1(app["run"], app["artifact"], f"{app['folder']}/input.raw")
        assert top1 == expected_raw == int(y[0]), text
