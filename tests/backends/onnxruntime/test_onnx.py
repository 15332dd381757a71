"""The onnx exporter and the onnxruntime runtime: export, int8 on real data, ONNX files from elsewhere, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from mobilize.core.artifact import Artifact
from mobilize.core.errors import ConfigError
from mobilize.exporters import EXPORTERS
from mobilize.core.context import Context
from mobilize.runtimes.base import RuntimeOptions, open_session
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec, make_random_inputs
from tests.conftest import assert_one_line_error

LIGHT_RESNET50 = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
DIGITS_SPEC = InputSpec((1, 1, 8, 8))
OnnxExporter = EXPORTERS.get("onnx")


def export(model, specs, tmp_path: Path, name: str, data: str | None = None, **options) -> Artifact:
    ctx = Context(input_specs=list(specs), data=open_data(data) if data else None)
    exporter = OnnxExporter(OnnxExporter.Config(**options))
    return exporter.export(model, ctx, tmp_path / name)


def ort_run(path: Path, x: torch.Tensor) -> np.ndarray:
    with open_session(Artifact.from_file(path), threads=1) as s:
        return s.run([x])[0].numpy()


def op_types(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


def with_real_bn_statistics(model: nn.Module, spec: InputSpec, samples: int = 16) -> nn.Module:
    """Re-estimate BatchNorm statistics on real photos: random-init MobileNetV2 outputs ~1e-9, which would
    make any absolute tolerance pass; with real statistics its logits are O(1)."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        for x, _ in open_data("sample-photos").batches(spec, limit=samples, batch_size=8):
            model(x)
    return model.eval()


def save_graph(path: Path, nodes, inputs, outputs, opset: int = 17) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def relu_model(path: Path, shape, opset: int = 17, node_input: str = "x") -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    return save_graph(path, [helper.make_node("Relu", [node_input], ["y"], name="relu_1")], [x], [y], opset)


# -- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits():
    """A small CNN trained for ~2 s on scikit-learn digits (8x8), with the test split."""
    def load(ref):
        xs, ys = zip(*open_data(ref).batches(DIGITS_SPEC, batch_size=512))
        return torch.cat(xs), torch.cat(ys)

    xtr, ytr = load("digits:train")
    xte, yte = load("digits:test")
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: extra threads only contend on a shared 2-core machine
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 16, 10))
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for _ in range(4):
        for idx in torch.randperm(len(xtr)).split(32):
            loss = nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.set_num_threads(threads)
    model.eval()
    with torch.no_grad():
        accuracy = (model(xte).argmax(1) == yte).float().mean().item()
    assert accuracy > 0.85, accuracy
    return model, xte, yte, accuracy


@pytest.fixture(scope="module")
def digits_onnx(digits, tmp_path_factory):
    return export(digits[0], [DIGITS_SPEC], tmp_path_factory.mktemp("digits"), "digits", dynamic_batch=True).path


def top1(path: Path, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((ort_run(path, x).argmax(1) == y.numpy()).mean())


# -- export ------------------------------------------------------------------------------------
def check_mobilenet_v2(tmp_path: Path, width: float, size: int) -> None:
    from mobilize.zoo import ZOO

    spec = InputSpec((1, 3, size, size))
    model = with_real_bn_statistics(ZOO.get("mobilenet_v2").build(width_mult=width), spec)
    art = export(model, [spec], tmp_path, "mnv2")
    x = next(iter(open_data("sample-photos").batches(spec, limit=1)))[0]
    with torch.no_grad():
        expected = model(x).numpy()
    got = ort_run(art.path, x)
    assert np.abs(expected).max() > 0.1  # real logits, so the tolerance below means something
    assert np.abs(got - expected).max() <= 1e-4
    proto = onnx.load(str(art.path))
    assert [i.name for i in proto.graph.input] == ["input"] and proto.opset_import[0].version >= 18
    assert not any("dynamo exporter failed" in n for n in art.notes)


def test_mobilenet_v2_fp32_matches_eager(tmp_path):
    check_mobilenet_v2(tmp_path, width=0.25, size=64)


@pytest.mark.slow
def test_mobilenet_v2_full_size_fp32_matches_eager(tmp_path):
    check_mobilenet_v2(tmp_path, width=1.0, size=224)


def test_dynamic_batch_float_model_matches_eager(digits, digits_onnx):
    model, xte, yte, accuracy = digits
    dims = onnx.load(str(digits_onnx)).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and not dims[0].HasField("dim_value")
    with torch.no_grad():
        expected = model(xte).numpy()
    assert np.abs(ort_run(digits_onnx, xte) - expected).max() <= 1e-4  # all 539 test digits in one batch
    assert top1(digits_onnx, xte, yte) == pytest.approx(accuracy, abs=1e-6)


def test_torchscript_exporter_fallback_is_noted(tmp_path):
    class Branchy(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1

    spec = InputSpec((1, 4))
    art = export(Branchy().eval(), [spec], tmp_path, "branchy")
    assert any("dynamo exporter failed (GuardOnDataDependentSymNode" in n and "TorchScript exporter" in n
               for n in art.notes), art.notes
    assert any("trace might not generalize" in n for n in art.notes), art.notes
    x = make_random_inputs([spec], seed=0)[0]  # the input the exporter traced with
    np.testing.assert_allclose(ort_run(art.path, x), Branchy()(x).numpy())


# -- quantization --------------------------------------------------------------------------------
def test_static_int8_qdq_keeps_digits_accuracy(digits, digits_onnx, tmp_path):
    _, xte, yte, accuracy = digits
    art = export(Artifact.from_file(digits_onnx), [DIGITS_SPEC], tmp_path, "int8", data="digits:train",
                 quantize="static", calibration="entropy")
    proto = onnx.load(str(art.path))
    inits = {t.name: t for t in proto.graph.initializer}
    dequant = [n for n in proto.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits]
    conv_weights = [n for n in dequant if len(inits[n.input[0]].dims) == 4]
    assert len(conv_weights) == 2 and all(inits[n.input[0]].data_type == TensorProto.INT8 for n in conv_weights)
    assert [list(inits[n.input[1]].dims) for n in conv_weights] == [[16], [32]]  # per-channel scales
    activations = [n for n in proto.graph.node if n.op_type == "QuantizeLinear"]
    assert activations and all(inits[n.input[2]].data_type == TensorProto.UINT8 for n in activations)
    int8 = top1(art.path, xte, yte)
    assert int8 >= accuracy - 0.03, (int8, accuracy)
    assert any("U8S8" in n and "S8S8" in n and "QOperator" in n for n in art.notes)
    assert any("calibrated entropy ranges on 100 batch(es) of 1" in n for n in art.notes), art.notes


def test_static_int8_excluded_node_stays_float(digits_onnx, tmp_path):
    art = export(Artifact.from_file(digits_onnx), [DIGITS_SPEC], tmp_path, "excl", data="digits:train",
                 quantize="static", calibration_samples=20, exclude_nodes=["node_conv2d_1"])
    nodes = {n.name: n for n in onnx.load(str(art.path)).graph.node}
    weights = {t.name for t in onnx.load(str(art.path)).graph.initializer}
    assert nodes["node_conv2d_1"].input[1] in weights            # float weight, no DequantizeLinear
    assert nodes["node_Conv_13"].input[1] not in weights         # the other conv is quantized
    assert any("on 20 batch(es)" in n for n in art.notes)
    with pytest.raises(ConfigError, match="no node named 'node_conv2d_9'.*did you mean: node_conv2d_1"):
        export(Artifact.from_file(digits_onnx), [DIGITS_SPEC], tmp_path, "bad", data="digits:train",
               quantize="static", exclude_nodes=["node_conv2d_9"])


def test_dynamic_int8_warns_on_cnn_and_quantizes_only_gemm_when_told(digits, digits_onnx, tmp_path):
    _, xte, yte, accuracy = digits
    art = export(Artifact.from_file(digits_onnx), [DIGITS_SPEC], tmp_path, "dyn", quantize="dynamic")
    assert "ConvInteger" in op_types(art.path)
    assert any("dynamic quantization on a conv-heavy model (2 Conv vs 1 MatMul/Gemm)" in n for n in art.notes)
    assert top1(art.path, xte, yte) >= accuracy - 0.03
    art = export(Artifact.from_file(digits_onnx), [DIGITS_SPEC], tmp_path, "dyn-gemm", quantize="dynamic",
                 exclude_op_types=["Conv"])
    assert "ConvInteger" not in op_types(art.path) and "DynamicQuantizeLinear" in op_types(art.path)
    assert not any("conv-heavy" in n for n in art.notes)
    assert not any("changed nothing" in n for n in art.notes)
    art = export(Artifact.from_file(digits_onnx), [DIGITS_SPEC], tmp_path, "dyn-none", quantize="dynamic",
                 exclude_op_types=["Conv", "MatMul"])  # an "exact" int8 file must say why it is exact
    assert not {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"} & set(op_types(art.path))
    assert any("dynamic quantization changed nothing" in n and "Conv x2" in n for n in art.notes), art.notes
    with pytest.raises(ConfigError, match="'conv' is not an op type.*did you mean: Conv"):
        export(Artifact.from_file(digits_onnx), [DIGITS_SPEC], tmp_path, "x", quantize="dynamic",
               exclude_op_types=["conv"])


def test_ort_format_for_mobile(digits, digits_onnx, tmp_path):
    art = export(Artifact.from_file(digits_onnx), [DIGITS_SPEC], tmp_path, "mobile", ort_format=True)
    assert art.path.suffix == ".ort" and not (tmp_path / "mobile.onnx").exists()
    assert art.path.read_bytes()[4:8] == b"ORTM"  # the ORT flatbuffer file identifier
    x = digits[1][:7]
    np.testing.assert_allclose(ort_run(art.path, x), ort_run(digits_onnx, x), atol=1e-5)
    with open_session(Artifact.from_file(art.path), threads=1) as s:
        s.run([x])
        details = s.details()  # an .ort file has no assignment record: counted from a profiled run
    assert details["providers_from"] == "profiled run" and details["providers"]["CPUExecutionProvider"] >= 4


def test_reduce_range_follows_the_cpu(tmp_path):
    from mobilize.backends.onnxruntime.exporter import _u8s8_saturates
    from mobilize.zoo import ZOO

    spec = InputSpec((1, 3, 32, 32))
    model = ZOO.get("conv_bn_relu").build()
    fp32 = export(model, [spec], tmp_path, "fp32").path
    xs = [x for x, _ in open_data("sample-photos").batches(spec, limit=8)]
    with torch.no_grad():
        refs = [model(x).numpy() for x in xs]
    scale = max(np.abs(r).max() for r in refs)

    def int8_error(source, name, **options):
        art = export(source, [spec], tmp_path, name, data="sample-photos", quantize="static",
                     calibration_samples=16, **options)
        return max(np.abs(ort_run(art.path, x) - r).max() for x, r in zip(xs, refs)) / scale, art.notes

    auto_error, notes = int8_error(model, "auto")  # PyTorch → int8 in one step
    assert auto_error < 0.05
    assert any("reduce_range on (7-bit weights)" in n for n in notes) == _u8s8_saturates()
    if _u8s8_saturates():  # the saturation the default avoids, measured on this CPU
        full_error, notes = int8_error(Artifact.from_file(fp32), "full", reduce_range=False)
        assert full_error > 4 * auto_error and any("warning: reduce_range is off" in n for n in notes)


def test_calibration_reads_the_data_lazily(digits_onnx):
    from mobilize.backends.onnxruntime.quant import BatchFeed

    pulled = []

    def batches():
        for i in range(1000):
            pulled.append(i)
            yield [torch.zeros(1, 1, 8, 8)]

    feed = BatchFeed(onnx.load(str(digits_onnx)), batches())
    reader = feed.chunk(8)
    assert sum(1 for _ in iter(reader.get_next, None)) == 8
    assert len(pulled) <= 9  # one batch of look-ahead, never the whole source
    bad = BatchFeed(onnx.load(str(digits_onnx)), iter([[torch.zeros(1, 1, 16, 16)]]))
    with pytest.raises(ConfigError, match="calibration data for input 'input' has shape \\(1,1,16,16\\) but the "
                                          "model expects \\(\\?,1,8,8\\)"):
        bad.get_next()


# -- runtime ------------------------------------------------------------------------------------
def test_io_binding_reuses_buffers_and_matches(digits_onnx):
    x1, x2 = torch.randn(3, 1, 8, 8), torch.randn(3, 1, 8, 8)
    with open_session(Artifact.from_file(digits_onnx), threads=1) as plain:
        expected1, expected2 = plain.run([x1])[0], plain.run([x2])[0]
        assert plain.details()["providers"] == {"CPUExecutionProvider": len(onnx.load(str(digits_onnx)).graph.node)}
    with open_session(Artifact.from_file(digits_onnx), threads=1) as s:
        s.use_io_binding()
        native = s.prepare([x1])
        first = s.run_prepared(native)
        assert s.run_prepared(native)[0] is first[0]                 # the same preallocated buffer every run
        got1 = s.run([x1])[0]
        got2 = s.run([x2])[0]
        torch.testing.assert_close(got1, expected1)
        torch.testing.assert_close(got2, expected2)
        assert s.details()["io_binding"] is True


def test_runtime_saves_the_optimized_model(tmp_path):
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in [("w", (4, 3, 3, 3)), ("scale", (4,)), ("bias", (4,)), ("mean", (4,))]]
    weights.append(numpy_helper.from_array(np.ones(4, np.float32), "var"))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], weights)
    path, out = tmp_path / "conv_bn.onnx", tmp_path / "optimized.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    options = RuntimeOptions(threads=1, extra={"graph_optimization_level": "basic", "optimized_model_path": str(out)})
    x = torch.randn(1, 3, 8, 8)
    with open_session(Artifact.from_file(path), options=options) as s:
        y = s.run([x])[0]
    assert op_types(path) == {"Conv", "BatchNormalization"} and op_types(out) == {"Conv"}  # fused at "basic"
    np.testing.assert_allclose(ort_run(out, x), y.numpy(), atol=1e-5)


# -- ONNX models made elsewhere -------------------------------------------------------------------
def test_light_resnet50_bench_reports_providers(run_cli, tmp_path):
    code, out, err = run_cli("bench", LIGHT_RESNET50, "--iter", "2", "--warmup", "0", "--threads", "2",
                             "--json", tmp_path / "r.json")
    assert code == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["runtime"] == "onnxruntime" and report["input_specs"][0]["shape"] == [1, 3, 224, 224]
    assert report["providers"]["CPUExecutionProvider"] > 100 and set(report["providers"]) == {"CPUExecutionProvider"}


def check_light_resnet50_int8(run, tmp_path: Path, data: str) -> str:
    code, out, err = run("optimize", LIGHT_RESNET50, "--recipe", "onnx-int8", "--data", data, "-o", tmp_path,
                         "--json", tmp_path / "r.json")
    assert code == 0, err
    (artifact,) = json.loads((tmp_path / "r.json").read_text())["artifacts"]
    # the onnx package's "light" test model gives the same output for every input (its weights are light stand-ins):
    # the file is faithful, and the check against that float model is vacuous, said so
    assert artifact["verify"]["fidelity"]["outcome"] == "OK"
    assert artifact["verify"]["outcome"] == "VACUOUS" and "does not depend on the input" in out
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= op_types(Path(artifact["artifact"]))
    notes = " | ".join(artifact["notes"])
    for fragment in ("converted opset 9 to 13", "IR version 3", "kept the output Softmax (n175) in float"):
        assert fragment in notes
    return err


def test_light_resnet50_static_int8_through_the_cli(run_cli, tmp_path):
    check_light_resnet50_int8(run_cli, tmp_path, "sample-photos:4")


@pytest.mark.slow
def test_light_resnet50_static_int8_full_calibration_clean_output(run_cli_process, tmp_path):
    assert check_light_resnet50_int8(run_cli_process, tmp_path, "sample-photos") == ""


# -- bad input: one line, exit code 2 ------------------------------------------------------------
def test_onnx_file_failing_the_checker(run_cli, tmp_path):
    path = relu_model(tmp_path / "bad.onnx", [1, 3, 8, 8], node_input="missing")
    for argv in (("bench", path), ("optimize", path, "--recipe", "onnx-fp32", "--input_dims", "1,3,8,8", "-o", tmp_path)):
        code, _, err = run_cli(*argv)
        assert_one_line_error(code, err, "fails the ONNX checker", "relu_1", "missing")


def test_opset_newer_than_onnxruntime(run_cli, tmp_path):
    path = relu_model(tmp_path / "new.onnx", [1, 3, 8, 8], opset=30)
    for argv in (("bench", path), ("optimize", path, "--recipe", "onnx-fp32", "--input_dims", "1,3,8,8", "-o", tmp_path)):
        code, _, err = run_cli(*argv)
        assert_one_line_error(code, err, "opset 30", "up to opset 28", "re-export")


def test_optimize_dynamic_dims_needs_input_dims(run_cli, tmp_path):
    path = relu_model(tmp_path / "dyn.onnx", ["batch", 3, 8, 8])
    code, _, err = run_cli("optimize", path, "--recipe", "onnx-fp32", "-o", tmp_path)
    assert_one_line_error(code, err, "input 'x' has dynamic dimensions ['batch', 3, 8, 8]", "--input_dims")
    code, out, err = run_cli("optimize", path, "--recipe", "onnx-fp32", "--input_dims", "2,3,8,8", "-o", tmp_path)
    assert code == 0, err


@pytest.mark.parametrize("shape,fragment", [
    ([1, 64], "calibration data 'digits' gives images, but input 'x' is (1,64) float"),
    ([1, 4, 8, 8], "calibration data 'digits' gives RGB images, but input 'x' has 4 channels"),
])
def test_calibration_data_that_does_not_fit(run_cli, tmp_path, shape, fragment):
    path = relu_model(tmp_path / "m.onnx", shape)
    code, _, err = run_cli("optimize", path, "--recipe", "onnx-int8", "--data", "digits", "-o", tmp_path)
    assert_one_line_error(code, err, fragment)


def test_input_dims_that_do_not_fit_the_onnx_model(run_cli, tmp_path):
    path = relu_model(tmp_path / "m.onnx", [1, 3, 16, 16])
    code, _, err = run_cli("optimize", path, "--recipe", "onnx-int8", "--data", "digits", "--input_dims", "1,3,8,8",
                           "-o", tmp_path)
    assert_one_line_error(code, err, "input 'x' is (1,3,16,16) in the model, but the input spec is (1,3,8,8)")


@pytest.mark.parametrize("target,chose", [("x86-avx2", True), ("x86-vnni", False), ("arm64", False)])
def test_reduce_range_note_names_the_cpu_feature_that_decided_it(tmp_path, target, chose):
    """The choice follows --target, never the x86 the test runs on; the note says what mobilize chose and why."""
    from mobilize.core.target import CHOSE, Target
    from mobilize.zoo import ZOO

    spec = InputSpec((1, 3, 16, 16))
    ctx = Context(input_specs=[spec], data=open_data("sample-photos"), target=Target.parse(target))
    exporter = OnnxExporter(OnnxExporter.Config(quantize="static", calibration_samples=4))
    art = exporter.export(ZOO.get("conv_bn_relu").build(), ctx, tmp_path / target)
    note = next(n for n in art.notes if "reduce_range" in n)
    assert (CHOSE in note) == chose and f"--target {target}" in note, note
    if chose:
        assert "ONNX Runtime's quantize_static defaults to off" in note and "avx512_vnni" in note
    else:
        assert "reduce_range off (8-bit weights, ONNX Runtime's default)" in note
