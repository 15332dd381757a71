"""The litert exporter and runtime: each recipe exports, loads, runs and passes the verify core; int8 files
are integer in the file; delegation notes; the runtime contract; one-line errors for bad input."""

from __future__ import annotations

import json

import pytest
import torch

from mobilize.accuracy.verify import Kind
from mobilize.core.artifact import Artifact
from mobilize.pipeline.build import build, verify_artifact
from mobilize.core.context import Context
from mobilize.core.errors import ConfigError, ExportError, UnsupportedModelError
from mobilize.exporters import EXPORTERS
from mobilize.backends.litert.tflite import read_tflite, tflite_delegation
from mobilize.pipeline.recipe import Recipe, load_recipe
from mobilize.runtimes.base import open_session
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec, MemoryFormat
from tests.conftest import INPUT_SHAPE, tiny_input, tiny_model
from tests.conftest import assert_one_line_error

pytest.importorskip("litert_torch")
pytest.importorskip("ai_edge_litert")

RECIPES = ("litert-fp32", "litert-int8", "litert-dynamic", "litert-fp16")
LiteRT = EXPORTERS.get("litert")


def small(recipe: Recipe) -> Recipe:
    """The recipe with 4 calibration samples (HistogramObserver takes ~0.1 s per sample here)."""
    return recipe.with_option("calibration_samples", 4) if recipe.name == "litert-int8" else recipe


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every litert recipe built from TinyNet (1x3x32x32), calibrated on the sample photos."""
    out = tmp_path_factory.mktemp("litert")
    results = {}
    for name in RECIPES:
        ctx = Context(input_specs=[InputSpec(INPUT_SHAPE)], data=open_data("sample-photos"))
        results[name] = build(tiny_model(), small(load_recipe(name)), ctx, out / name)
    return results


@pytest.mark.parametrize("name,kind", [("litert-fp32", Kind.FLOAT), ("litert-int8", Kind.QUANTIZED),
                                       ("litert-dynamic", Kind.QUANTIZED), ("litert-fp16", Kind.REDUCED)])
def test_litert_recipe_passes_the_verify_core(built, name, kind):
    result = built[name]
    [art] = result.artifacts
    assert art.kind == kind and art.artifact.path.suffix == ".tflite"
    verdict = verify_artifact(art, result.module, result.context)
    assert verdict.ok, verdict.reason
    assert verdict.rule == f"{kind}-sqnr"


def test_litert_int8_files_are_integer(built):
    int8 = read_tflite(built["litert-int8"].artifacts[0].artifact.path)
    assert int8.precision == "int8"
    assert int8.integer_ops == sum(int8.op_counts.values()) and int8.float_ops == {}  # every op computes on int8
    assert int8.weight_types.get("INT8", 0) >= 2 and int8.quantized_tensors >= 6
    assert int8.inputs[0].dtype == "INT8" and int8.inputs[0].quantized
    dynamic = read_tflite(built["litert-dynamic"].artifacts[0].artifact.path)
    assert dynamic.weight_types.get("INT8", 0) >= 2 and dynamic.integer_ops == 0 and dynamic.inputs[0].dtype == "FLOAT32"
    fp16 = read_tflite(built["litert-fp16"].artifacts[0].artifact.path)
    assert fp16.weight_types.get("FLOAT16", 0) >= 2 and fp16.op_counts.get("DEQUANTIZE", 0) >= 2
    fp32 = read_tflite(built["litert-fp32"].artifacts[0].artifact.path)
    assert set(fp32.weight_types) <= {"FLOAT32", "INT32"} and fp32.quantized_tensors == 0


def test_litert_notes_and_manifest_state_delegation_and_layout(built):
    art = built["litert-fp32"].artifacts[0]
    assert any("XNNPACK runs all" in n for n in art.artifact.notes)
    assert art.details["delegation"]["delegated_percent"] == 100.0
    manifest = json.loads(art.artifact.manifest_path.read_text())
    assert manifest["input_specs"][0] == {"shape": list(INPUT_SHAPE), "dtype": "float",
                                          "memory_format": "channels_last"}
    assert read_tflite(art.artifact.path).inputs[0].shape == (1, 32, 32, 3)  # NHWC in the file itself


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_litert_runtime_contract(built, tmp_path, layout):
    """The registry's runtime contract (tests/contract/test_registries.py) on a TinyNet .tflite, in both layouts."""
    art = built["litert-fp32"].artifacts[0].artifact  # the recipe's: NHWC
    if layout == "nchw":
        art = LiteRT(LiteRT.Config(input_layout=layout)).export(tiny_model(), Context(input_specs=[InputSpec(INPUT_SHAPE)]),
                                                                tmp_path / "tiny")
    x, reference = tiny_input(), tiny_model()(tiny_input())
    session = open_session(Artifact.from_file(art.path), threads=1)
    try:
        assert session.name == "litert" and session.threads == 1
        [spec] = session.declared_input_specs()
        assert spec.shape == INPUT_SHAPE
        assert spec.memory_format == (MemoryFormat.CHANNELS_LAST if layout == "nhwc" else MemoryFormat.CONTIGUOUS)
        torch.testing.assert_close(session.run([x])[0], reference, atol=1e-4, rtol=1e-4)
        session.set_threads(2)
        assert session.threads == 2
        torch.testing.assert_close(session.run([x])[0], reference, atol=1e-4, rtol=1e-4)
        assert session.details()["delegation"]["builtin_ops"] == 0
    finally:
        session.close()


def test_litert_warns_when_most_ops_fall_back(tmp_path):
    class Cumsum(torch.nn.Module):  # CUMSUM has no XNNPACK kernel
        def forward(self, x):
            return torch.cumsum(torch.cumsum(x, dim=1), dim=1) * 2.0

    ctx = Context(input_specs=[InputSpec((1, 8))])
    exporter = LiteRT(LiteRT.Config(input_layout="nchw"))
    art = exporter.export(Cumsum().eval(), ctx, tmp_path / "cumsum")
    assert exporter.details["delegation"]["builtin_by_op"].get("CUMSUM") == 2
    assert any(n.startswith("litert: WARNING: only") for n in art.notes), art.notes
    with open_session(Artifact.from_file(art.path), threads=1) as s:
        x = torch.ones(1, 8)
        torch.testing.assert_close(s.run([x])[0], Cumsum()(x))


def test_delegation_walk_counts_ops_left_out():
    """A DELEGATE node took conv -> relu; the fully-connected op before it stays on builtin kernels."""
    ops = [{"index": 0, "op_name": "FULLY_CONNECTED", "inputs": [0, 1, -1], "outputs": [2]},
           {"index": 1, "op_name": "CONV_2D", "inputs": [2, 3, 4], "outputs": [5]},
           {"index": 2, "op_name": "RELU", "inputs": [5], "outputs": [6]},
           {"index": 3, "op_name": "DELEGATE", "inputs": [2, 3, 4], "outputs": [6]}]
    report = tflite_delegation(ops)
    assert report.delegated_by_op == {"CONV_2D": 1, "RELU": 1} and report.builtin_by_op == {"FULLY_CONNECTED": 1}
    assert report.delegate_calls == 1 and round(report.delegated_percent) == 67
    assert "FULLY_CONNECTED x1 run on builtin kernels" in report.warning()


def test_litert_bad_inputs_are_one_line_errors(tmp_path):
    ctx = Context(input_specs=[InputSpec(INPUT_SHAPE)])
    with pytest.raises(ConfigError, match="not an onnx file"):
        LiteRT().export(Artifact(tmp_path / "model.onnx", "onnx"), ctx, tmp_path / "m")
    with pytest.raises(ConfigError, match="calibration_samples must be at least 1"):
        LiteRT.Config(calibration_samples=0)
    ctx.quant.quantized = True
    with pytest.raises(ConfigError, match="already eager-quantized"):
        LiteRT().export(tiny_model(), ctx, tmp_path / "m")

    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1

    with pytest.raises(ExportError, match="data-dependent control flow") as info:
        LiteRT().export(Branchy(), Context(input_specs=[InputSpec((1, 4))]), tmp_path / "b")
    assert "\n" not in str(info.value)
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(UnsupportedModelError, match="not a LiteRT/TFLite flatbuffer"):
        open_session(Artifact.from_file(bad))
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")], "no temp files left behind"


def test_litert_cli_optimize_and_bench(capfd, tmp_path, built):
    from mobilize.cli.main import main

    def cli(*argv) -> tuple[int, str, str]:  # in-process, with real file descriptors (the progress line uses fd 2)
        capfd.readouterr()
        code = main([str(a) for a in argv])
        return (code, *capfd.readouterr())

    code, out, err = cli("optimize", "zoo:conv_bn_relu", "--recipe", "litert-dynamic", "--input_dims", "1,3,32,32",
                         "-o", tmp_path)
    assert code == 0, err
    assert "conv_bn_relu-litert-dynamic.tflite" in out and "verified" in out and "XNNPACK runs all" in out
    path = built["litert-int8"].artifacts[0].artifact.path
    code, out, err = cli("bench", path, "--iter", "5", "--warmup", "1", "--threads", "1", "--json", tmp_path / "b.json")
    assert code == 0, err
    report = json.loads((tmp_path / "b.json").read_text())
    assert report["runtime"] == "litert" and report["precision"] == "int8" and report["latency_ms_p50"] > 0
    assert report["input_specs"][0]["shape"] == list(INPUT_SHAPE)
    code, _, err = cli("bench", path, "--input_dims", "1,3,16,16", "--iter", "2")
    assert_one_line_error(code, err, "input 0 has shape (1,3,16,16) but the model expects (1,3,32,32)")
