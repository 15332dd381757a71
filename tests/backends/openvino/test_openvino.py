"""The openvino exporter and runtime: each recipe exports, loads, runs and passes the verify core; int8 IRs
hold FakeQuantize ops and int8 weights; the inference precision is explicit (f32 never a silent bf16) and
the runtime reports what each layer really ran in; the runtime contract; one-line errors for bad input."""

from __future__ import annotations

import collections
import json

import pytest
import torch

from mobilize.accuracy.verify import Kind
from mobilize.core.artifact import Artifact
from mobilize.pipeline.build import build, verify_artifact
from mobilize.core.context import Context
from mobilize.core.errors import ConfigError, UnsupportedModelError
from mobilize.exporters import EXPORTERS
from mobilize.pipeline.recipe import load_recipe
from mobilize.runtimes.base import open_session
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec
from tests.conftest import INPUT_SHAPE, tiny_input, tiny_model

ov = pytest.importorskip("openvino")

RECIPES = ("openvino-fp32", "openvino-int8", "openvino-bf16", "openvino-fp16")
OpenVino = EXPORTERS.get("openvino")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("openvino")
    results = {}
    for name in RECIPES:
        ctx = Context(input_specs=[InputSpec(INPUT_SHAPE)], data=open_data("sample-photos"))
        recipe = load_recipe(name)
        if name == "openvino-int8":
            recipe = recipe.with_option("calibration_samples", 16)
        results[name] = build(tiny_model(), recipe, ctx, out / name)
    return results


@pytest.mark.parametrize("name,kind,asked", [
    ("openvino-fp32", Kind.FLOAT, "f32"),
    ("openvino-int8", Kind.QUANTIZED, "f32"),
    ("openvino-bf16", Kind.REDUCED, "bf16"),
    ("openvino-fp16", Kind.REDUCED, "f16"),
])
def test_openvino_recipe_passes_the_verify_core(built, name, kind, asked):
    """What each file computes in is asked of the runtime, never guessed from CPU flags: the IR's precision is
    the one asked for; the plugin computes in what its compiled model reports - the asked precision where the CPU
    has it, f32 where it has no reduced float (an fp16 IR on an AVX2-only x86), bf16 for an f16 hint on a CPU with
    bf16 but no native f16 (Zen 4/5 with avx512_bf16) - and whenever that differs from the ask, a note names it."""
    result = built[name]
    [art] = result.artifacts
    assert art.kind == kind and art.artifact.path.suffix == ".xml"
    verdict = verify_artifact(art, result.module, result.context)
    assert verdict.ok, verdict.reason
    with open_session(art.artifact, threads=1) as session:
        details, notes = session.details(), list(session.notes)
    computes = details["computes_in"]
    assert details["inference_precision"] == asked and computes in ("f32", "f16", "bf16")
    if kind == Kind.REDUCED:
        assert computes in (asked, "f32", "bf16")  # the ask, or the plugin's fallback on this CPU (read, not guessed)
    else:
        assert computes == "f32"
    assert details["compiled"]["inference_precision_hint"] in (computes, {"f32": "float32", "f16": "float16",
                                                                          "bf16": "bfloat16"}[computes])
    main = "int8" if name == "openvino-int8" else computes
    assert details["ran_in"].startswith(main) and "(2 of 2 conv/matmul layers" in details["ran_in"], details["ran_in"]
    assert any(f"asked for {asked} inference; the CPU plugin computes in {computes}" in n
               for n in notes) == (computes != asked), notes
    if kind == Kind.FLOAT:  # the point of pinning: OpenVINO's own default on AMX CPUs is bf16
        assert details["compiled"]["inference_precision_hint"] == "f32"


def test_layer_precisions_follow_what_the_plugin_computes_in():
    """The forced path of a CPU without native fp16, on any CPU: with an effective f32 precision, layers that
    report f16 (they read fp16-compressed weights) are f32 with f16 weights; with f16 effective, f16."""
    from mobilize.backends.openvino.runtime import _precision_name, _runtime_precisions

    class Value:
        def __init__(self, text):
            self.text = text

        def astype(self, _):
            return self.text

    class Op:
        def __init__(self, kind, precision):
            self.info = {"layerType": Value(kind), "runtimePrecision": Value(precision)}

        def get_rt_info(self):
            return self.info

        def get_type_name(self):
            return self.info["layerType"].text

    class Compiled:
        def get_runtime_model(self):
            return self

        def get_ordered_ops(self):
            return [Op("Input", "f32"), Op("Convolution", "f16"), Op("FullyConnected", "f16"), Op("Eltwise", "f32")]

    assert _precision_name(ov.Type.f32) == "f32" and _precision_name("float16") == "f16"
    assert _runtime_precisions(Compiled(), "f32")["summary"] == "f32 with f16 weights (2 of 2 conv/matmul layers)"
    assert _runtime_precisions(Compiled(), "f16")["summary"] == "f16 (2 of 2 conv/matmul layers)"


def test_openvino_int8_ir_is_quantized(built):
    model = ov.Core().read_model(str(built["openvino-int8"].artifacts[0].artifact.path))
    ops = collections.Counter(op.get_type_name() for op in model.get_ordered_ops())
    constants = collections.Counter(op.get_output_element_type(0).get_type_name()
                                    for op in model.get_ordered_ops() if op.get_type_name() == "Constant")
    assert ops["FakeQuantize"] >= 3 and constants["i8"] >= 2  # activations + conv and linear weights
    float_model = ov.Core().read_model(str(built["openvino-fp32"].artifacts[0].artifact.path))
    assert not any(op.get_type_name() == "FakeQuantize" for op in float_model.get_ordered_ops())


def test_openvino_ir_files_and_manifest(built, tmp_path):
    art = built["openvino-fp16"].artifacts[0].artifact
    xml, weights = art.path, art.path.with_suffix(".bin")
    assert weights.exists() and art.size_bytes == xml.stat().st_size + weights.stat().st_size
    assert not [f for f in xml.parent.iterdir() if f.name.startswith(".")], "no temp files left behind"
    assert json.loads(art.manifest_path.read_text())["size_bytes"] == art.size_bytes
    model = ov.Core().read_model(str(xml))
    assert model.get_rt_info(["runtime_options", "INFERENCE_PRECISION_HINT"]).astype(str) == "f16"
    assert any(op.get_output_element_type(0).get_type_name() == "f16"
               for op in model.get_ordered_ops() if op.get_type_name() == "Constant")  # fp16 weights


def test_openvino_runtime_contract(built):
    """Latency hint, one stream, the thread count given; reloading with other threads keeps the answers."""
    x, reference = tiny_input(), tiny_model()(tiny_input())
    session = open_session(Artifact.from_file(built["openvino-fp32"].artifacts[0].artifact.path), threads=1)
    try:
        assert session.name == "openvino" and session.declared_input_specs()[0].shape == INPUT_SHAPE
        torch.testing.assert_close(session.run([x])[0], reference, atol=1e-5, rtol=1e-4)
        session.set_threads(2)
        compiled = session.details()["compiled"]
        assert (compiled["inference_num_threads"], compiled["num_streams"], compiled["performance_hint"]) == \
            ("2", "1", "LATENCY")
        torch.testing.assert_close(session.run([x])[0], reference, atol=1e-5, rtol=1e-4)
        # run_prepared binds prepared inputs once and re-runs them with infer() alone: a second prepared input,
        # and the first again after a recompile, must each give their own answers, not the last bound one's
        other = torch.rand_like(x)
        first, second = session.prepare([x]), session.prepare([other])
        for native, want in ((first, reference), (first, reference), (second, tiny_model()(other)),
                             (first, reference)):
            got = session.outputs_to_torch(session.run_prepared(native))[0]
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
        session.set_threads(1)
        torch.testing.assert_close(session.outputs_to_torch(session.run_prepared(first))[0], reference,
                                   atol=1e-5, rtol=1e-4)
    finally:
        session.close()


def test_onnx_files_run_in_f32_on_openvino(tmp_path):
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(tiny_model(), (tiny_input(),), str(path), dynamo=False, input_names=["input"])
    with open_session(Artifact.from_file(path), runtime="openvino", threads=1) as session:
        assert session.details()["compiled"]["inference_precision_hint"] == "f32"
        torch.testing.assert_close(session.run([tiny_input()])[0], tiny_model()(tiny_input()), atol=1e-5, rtol=1e-4)
    art = OpenVino().export(Artifact.from_file(path), Context(input_specs=[InputSpec(INPUT_SHAPE)]), tmp_path / "ir")
    with open_session(art, threads=1) as session:  # the ONNX file converted to IR
        torch.testing.assert_close(session.run([tiny_input()])[0], tiny_model()(tiny_input()), atol=1e-5, rtol=1e-4)


def test_openvino_bad_inputs_are_one_line_errors(tmp_path):
    ctx = Context(input_specs=[InputSpec(INPUT_SHAPE)])
    with pytest.raises(ConfigError, match="not a tflite file"):
        OpenVino().export(Artifact(tmp_path / "m.tflite", "tflite"), ctx, tmp_path / "m")
    with pytest.raises(ConfigError, match="calibration_samples must be at least 1"):
        OpenVino.Config(calibration_samples=0)
    bad = tmp_path / "bad.xml"
    bad.write_text("<net><layers></net>")
    with pytest.raises(UnsupportedModelError, match="OpenVINO could not read") as info:
        open_session(Artifact.from_file(bad))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("target,chose", [("x86-avx2", True), ("x86-vnni", False), ("arm64", False)])
def test_the_overflow_fix_follows_the_target_and_the_recipe_pins_it(tmp_path, target, chose):
    """x64 int8 kernels without VNNI sum pairs of 8-bit products in int16 and saturate: NNCF's overflow fix on every
    layer for such a target (as ONNX Runtime's reduce_range), its default (first layer only) for the others - the
    choice follows --target, never the x86 the test runs on; the note says which and why; the recipe records it."""
    from mobilize.backends.openvino.exporter import OpenVinoExporter
    from mobilize.core.target import CHOSE, Target
    from mobilize.zoo import ZOO

    ctx = Context(input_specs=[InputSpec((1, 3, 16, 16))], data=open_data("sample-photos"), target=Target.parse(target))
    exporter = OpenVinoExporter(OpenVinoExporter.Config(quantize="int8", calibration_samples=4))
    art = exporter.export(ZOO.get("conv_bn_relu").build(), ctx, tmp_path / target)
    note = next(n for n in art.notes if "overflow fix" in n)
    assert (CHOSE in note) == chose and f"--target {target}" in note, note
    assert ("on every layer" in note) == chose and ("first layer only (its default)" in note) != chose, note
    assert exporter.decided(ctx) == {"overflow_fix": chose}
    pinned = OpenVinoExporter(OpenVinoExporter.Config(quantize="int8", calibration_samples=4, overflow_fix=chose))
    assert pinned.decided(ctx) == {}
