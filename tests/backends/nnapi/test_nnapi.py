"""The NNAPI target: three modes, CPU twins, the op check, the host interpreter, the adb script, device logs.

MobileNetV2 runs at 1x3x64x64 here (224 is marked slow).  The NNAPI runtime exists only on
Android: what cannot run on this host is checked to fail with its reason, never faked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

from mobilize.core.artifact import Artifact
from mobilize.pipeline.build import build
from mobilize.core.context import Context, QuantState
from mobilize.core.errors import AccuracyError, ConfigError, UnsupportedModelError
from mobilize.exporters import EXPORTERS
from mobilize.backends.nnapi.exporter import NnapiConfig
from mobilize.backends.nnapi import nnapi_format as fmt
from mobilize.pipeline.recipe import load_recipe
from mobilize.runtimes.base import open_session
from mobilize.core.inputs import InputSpec
from tests.conftest import BENCH_JSON_FIELDS as JSON_FIELDS

SMALL = (1, 3, 64, 64)
BENCH_FLAGS = "--pthreadpool_size=1 --use_bundled_input=0 --warmup=5 --iter=200"


def _cli(*argv: str) -> tuple[int, str]:
    from mobilize.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(a) for a in argv])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    """MobileNetV2 at 64x64 in the three modes: full through the CLI (`mobilize optimize zoo:mobilenet_v2 --recipe
    nnapi-full`, its output kept for its own test); none and core through build() on the same architecture with
    BatchNorm settled at 64x64 and core calibrated on 2 samples (the recipes' own steps otherwise), to save time."""
    from mobilize.pipeline.recipe import Recipe
    from mobilize.zoo.mobilenet_v2 import MobileNetV2, settle_batchnorm

    out = tmp_path_factory.mktemp("nnapi")
    torch.manual_seed(0)
    model = settle_batchnorm(MobileNetV2(), size=SMALL[-1], samples=2)
    result = {}
    for mode in ("none", "core"):
        recipe = load_recipe(f"nnapi-{mode}").to_dict()
        for step in recipe["passes"]:
            if isinstance(step, dict) and "quantize" in step:
                step["quantize"]["calibration_samples"] = 2
        ctx = Context(input_specs=[InputSpec(SMALL)])
        built = build(model, Recipe.from_dict(recipe), ctx, out / f"mnv2-{mode}").artifacts[0]
        result[mode] = built.artifact
    cli = out / "cli"
    code, text = _cli("optimize", "zoo:mobilenet_v2", "--recipe", "nnapi-full", "--input_dims", "1,3,64,64",
                      "-o", cli)
    assert code == 0, text
    result["full"] = Artifact.from_file(cli / "mobilenet_v2-nnapi-full.nnapi.ptl")
    result["cli_output"], result["folder"] = text, cli
    return result


def _details(art: Artifact) -> dict:
    with open_session(art) as session:
        return session.details()["nnapi"]


@pytest.mark.parametrize("mode", ["none", "core", "full"])
def test_mobilenet_v2_converts_in_each_mode(exported, mode):
    art = exported[mode]
    assert art.path.name.endswith(".nnapi.ptl") and Artifact.from_file(art.path).format == "nnapi"
    twin = fmt.nnapi_twin_path(art.path)
    assert twin.exists() and Artifact.from_file(twin).format == "lite"
    manifest = json.loads(art.manifest_path.read_text())
    assert manifest["format"] == "nnapi" and manifest["input_specs"][0]["memory_format"] == "channels_last"
    assert any(f"mode {mode}:" in n for n in manifest["notes"])
    assert any("deprecated from Android 15" in n and "ExecuTorch" in n and "LiteRT" in n for n in manifest["notes"])
    ops = _details(art)["operations"]
    assert ops["CONV_2D"] > 10 and ops["DEPTHWISE_CONV_2D"] == 17 and ops["FULLY_CONNECTED"] == 1


@pytest.mark.parametrize("mode,payload_in,file_in,file_out", [
    ("none", "TENSOR_FLOAT32", torch.float32, torch.float32),
    ("core", "TENSOR_QUANT8_ASYMM", torch.float32, torch.float32),
    ("full", "TENSOR_QUANT8_ASYMM", torch.quint8, torch.quint8),
])
def test_interfaces_have_the_promised_dtypes(exported, mode, payload_in, file_in, file_out):
    art = exported[mode]
    with open_session(art) as session:
        details = session.details()["nnapi"]
        bundled = session.bundled_inputs()[0]
        got = session.run(bundled)
    assert details["inputs"][0].startswith(payload_in) and details["outputs"][0].startswith(payload_in)
    assert (details["cpu_quantize_input"] is not None) == (mode == "core") == details["cpu_dequantize_output"]
    assert bundled[0].dtype == file_in and bundled[0].is_contiguous(memory_format=torch.channels_last)
    assert got[0].dtype == file_out and tuple(got[0].shape) == (1, 1000)
    with open_session(Artifact.from_file(fmt.nnapi_twin_path(art.path)), "lite") as twin:
        assert twin.bundled_inputs()[0][0].dtype == file_in
        assert twin.run(twin.bundled_inputs()[0])[0].dtype == file_out


def test_float_mode_matches_its_twin_to_rounding(exported):
    """Judged like every float file (rule float-sqnr), not by a fixed absolute tolerance: MobileNetV2's logits
    reach ~80, where float32 rounding alone differs by 1e-4 between x86 kernel paths (AVX2 vs AVX-512)."""
    from mobilize.accuracy.verify import Kind, compare_outputs, judge

    art = exported["none"]
    got, expected = [], []
    with open_session(art) as session, open_session(Artifact.from_file(fmt.nnapi_twin_path(art.path))) as twin:
        for seed in range(2):
            x = torch.randn(SMALL, generator=torch.Generator().manual_seed(seed))
            got.append(session.run([x]))
            expected.append(twin.run([x]))
    verdict = judge(compare_outputs(got, expected), Kind.FLOAT)
    assert verdict.ok and (verdict.numbers["sqnr_db"] is None or verdict.numbers["sqnr_db"] > 80), verdict.reason
    check = json.loads(art.manifest_path.read_text())
    assert any("end to end: max abs difference" in n and "(rule float-sqnr)" in n for n in check["notes"])


@pytest.mark.parametrize("mode", ["core", "full"])
def test_quantized_modes_match_their_twin_op_by_op_and_state_the_rest(exported, mode):
    """Each NNAPI operation, fed the twin's own inputs, is within one quantization step of the twin on at least
    99% of its elements; end to end, rounding differences accumulate, within rule output-steps' bound from the
    rounding model (this seeded net: ~20% within one step, ~20 steps at most), with the figures stated."""
    art = exported[mode]
    notes = [n for n in json.loads(art.manifest_path.read_text())["notes"] if "host check" in n]
    assert len(notes) == 1
    per_op = re.search(r"(\d+) of (\d+) ops compared, ([\d.]+)% of (\d+) elements within 1 step", notes[0])
    assert per_op and per_op.group(1) == per_op.group(2) and float(per_op.group(3)) >= 99.0
    worst = re.search(r"worst (\w+ #\d+) at ([\d.]+)%", notes[0])
    assert worst and float(worst.group(2)) >= 99.0
    end = re.search(r"end to end: ([\d.]+)% of (\d+) output elements within one step \(rounding model: ([\d.]+)%\), "
                    r"RMS ([\d.]+) steps <= ([\d.]+), max (\d+) steps <= (\d+) .*\(rule output-steps\); output step "
                    r"[\d.e-]+, SQNR ([\d.]+) dB", notes[0])
    assert end, notes[0]
    assert int(end.group(2)) == 2000 and float(end.group(4)) > 1 and int(end.group(6)) > 1


def test_cli_optimize_nnapi_full_writes_files_twin_script_and_prints_the_check(exported):
    text, folder = exported["cli_output"], exported["folder"]
    names = {p.name for p in folder.iterdir()}
    assert {"mobilenet_v2-nnapi-full.nnapi.ptl", "mobilenet_v2-nnapi-full.cpu.ptl", "nnapi_benchmark.sh",
            "mobilenet_v2-nnapi-full.nnapi.ptl.manifest.json", "mobilenet_v2-nnapi-full.cpu.ptl.manifest.json"} <= names
    # faithful to its prepared int8 model (fidelity); random-init MobileNetV2 at 64x64 loses cosine ~0.96 against
    # float, outside the 0.99 budget (quality): both halves are printed, the outcome is the budget's
    line = re.search(r"mobilenet_v2-nnapi-full\.nnapi\.ptl +[\d.]+ MB +nnapi +(\w+) \((.*)", text)
    assert line and line.group(1) in ("verified", "OVER_BUDGET"), text
    assert "fidelity vs the model it was exported from: " in line.group(2) and "quality vs the float model: " in line.group(2)
    # the int8 file's fidelity is its check against its CPU twin in output steps, in the verdict, not only a note
    fidelity = line.group(2).split("fidelity vs the model it was exported from: ")[1]
    assert "vs its CPU twin (the same graph on the lite interpreter), end to end: " in fidelity, fidelity
    assert "(rule output-steps)" in fidelity and "vs the prepared module: " in fidelity, fidelity
    assert "host check: 2 seeded random inputs: per operation" in text
    assert "quint8 in (scale" in text and "quint8 out" in text
    # the paths printed and recorded are the final ones, not the staging folder's the files were written in
    assert f"on-device benchmark: sh {folder / 'nnapi_benchmark.sh'} " in text
    assert ".mobilize-staging" not in text
    for manifest in folder.glob("*.manifest.json"):
        assert ".mobilize-staging" not in manifest.read_text()


def test_adb_script_names_the_right_files(exported):
    folder = exported["folder"]
    script = (folder / "nnapi_benchmark.sh").read_text()
    subprocess.run(["sh", "-n", str(folder / "nnapi_benchmark.sh")], check=True)
    models = ["mobilenet_v2-nnapi-full.nnapi.ptl", "mobilenet_v2-nnapi-full.cpu.ptl"]
    pushed = re.findall(r"^adb push (\S+) \"\$DIR/\"", script, re.M)
    run = re.findall(r"speed_benchmark_torch --model=(\S+) (.*?) > (\S+) 2>&1", script)
    pulled = re.findall(r"^adb pull \"\$DIR/(\S+)\" device-logs/(\S+)$", script, re.M)
    parsed = re.findall(r"bench --from-log device-logs/(\S+) --model (\S+) ", script)
    assert pushed == models and [r[0] for r in run] == models
    assert all(r[1].startswith(BENCH_FLAGS) for r in run)
    assert [p[0] for p in pulled] == [m + ".log" for m in models] == [r[2] for r in run]
    assert parsed == [(m + ".log", m) for m in models]
    # the other modes' files live in another folder and are not named
    assert "mnv2-core" not in script and "nnapi-none" not in script


def test_adb_script_covers_every_nnapi_file_in_its_folder(exported):
    from mobilize.backends.nnapi.adb import nnapi_files, write_adb_script

    folder = exported["none"].path.parent
    script = write_adb_script(folder).read_text()
    pairs = nnapi_files(folder)
    assert [p[0].name for p in pairs] == ["mnv2-core.nnapi.ptl", "mnv2-none.nnapi.ptl"]
    for nnapi, twin in pairs:
        assert twin == fmt.nnapi_twin_path(nnapi)
        for f in (nnapi, twin):
            assert f"adb push {shlex.quote(f.name)} " in script and f"--model={f.name} {BENCH_FLAGS}" in script


def test_nnapi_runtime_is_android_only_and_says_why(exported):
    art = exported["none"]
    module = torch.jit.load(str(art.path))
    x = module.get_all_bundled_inputs()[0]
    reason = fmt.device_runtime_status(fmt.read_pipeline(module).payload)
    if reason is None:
        pytest.skip("a real NNAPI runtime (libneuralnetworks.so) is loadable on this host")
    assert "libneuralnetworks" in reason
    with pytest.raises(RuntimeError, match="libneuralnetworks"):
        module(*x)  # the real path, as speed_benchmark_torch runs it on a phone
    assert _details(art)["device_runtime"] == f"unavailable here: {reason}"


def test_bench_refuses_to_time_the_host_interpreter(exported, run_cli):
    code, out, err = run_cli("bench", exported["none"].path, "--iter", "3")
    assert code == 2 and "on device only" in err and "Main run finished" not in out


def test_unsupported_ops_are_listed_at_once_with_module_paths(tmp_path):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.act, self.gelu = nn.Conv2d(8, 8, 3, padding=1), nn.Hardswish(), nn.GELU()

        def forward(self, x):
            return self.gelu(self.act(self.conv(x)))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.bn, self.block, self.fc = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), Block(), nn.Linear(8, 4)

        def forward(self, x):
            x = self.block(self.bn(self.stem(x)))
            return self.fc(torch.tanh(x.mean((2, 3))))

    ctx = Context(input_specs=[InputSpec((1, 3, 16, 16))])
    with pytest.raises(UnsupportedModelError) as info:
        EXPORTERS.get("nnapi")().export(Net().eval(), ctx, tmp_path / "net")
    found = [(u["kind"], u["module_path"]) for u in info.value.unsupported]
    assert found == [("aten::hardswish", "block.act"), ("aten::gelu", "block.gelu"), ("aten::tanh", "")]
    message = str(info.value)
    assert "cannot take 3 op(s)" in message and "block.act" in message and "the top module's forward" in message
    assert "use nn.ReLU6" in message and "executorch" in message.lower()
    assert not list(tmp_path.glob("*.ptl")), "nothing written"


class _OpsNet(nn.Module):
    """The other CNN ops the converter emits: cat, max pool, transposed conv, nearest upsampling, avg pool, relu6,
    sigmoid, mul, mean, softmax."""

    def __init__(self, avg_padding: int):
        super().__init__()
        self.a, self.b, self.r6 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(3, 8, 1), nn.ReLU6()
        self.up, self.fc, self.avg_padding = nn.ConvTranspose2d(16, 8, 2, stride=2), nn.Linear(8, 5), avg_padding

    def forward(self, x):
        y = nn.functional.max_pool2d(torch.cat([self.r6(self.a(x)), torch.sigmoid(self.b(x))], 1), 2, 2)
        y = nn.functional.interpolate(self.up(y), scale_factor=2.0, mode="nearest")
        y = nn.functional.avg_pool2d(y, 3, stride=2, padding=self.avg_padding)
        return torch.softmax(self.fc((y * y + y).mean((2, 3))), 1)


def test_host_check_covers_the_other_ops_and_catches_a_converter_mismatch(tmp_path):
    """With padding, torch's avg_pool2d averages over the padding (count_include_pad=True) while NNAPI's
    AVERAGE_POOL_2D leaves it out, and the converter passes the padding on as is: only the host check sees it."""
    torch.manual_seed(0)
    ctx = Context(input_specs=[InputSpec((1, 3, 16, 16))])
    exporter = EXPORTERS.get("nnapi")()
    art = exporter.export(_OpsNet(avg_padding=0).eval(), ctx, tmp_path / "ok")
    with open_session(art) as session:
        ops = set(session.details()["nnapi"]["operations"])
    assert {"CONCATENATION", "MAX_POOL_2D", "TRANSPOSE_CONV_2D", "RESIZE_NEAREST_NEIGHBOR", "AVERAGE_POOL_2D", "RELU6",
            "LOGISTIC", "MUL", "MEAN", "SOFTMAX"} <= ops
    check = exporter.details["nnapi"]["host_check"]
    assert check["ok"] and check["per_operation"]["operations_compared"] == check["per_operation"]["operations"]
    with pytest.raises(AccuracyError, match=r"worst AVERAGE_POOL_2D #\d+ at SQNR [0-5]?\d\.\d dB.*rule float-sqnr.*count_include_pad"):
        EXPORTERS.get("nnapi")().export(_OpsNet(avg_padding=1).eval(), ctx, tmp_path / "padded")


class _QuantNet(nn.Module):
    """Conv-ReLU, a residual add and a linear head: every quantized op kind MobileNetV2 uses, at 16x16."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = torch.ao.quantization.QuantStub(), torch.ao.quantization.DeQuantStub()
        self.conv, self.relu = nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()
        self.dw, self.add = nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.ao.nn.quantized.FloatFunctional()
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = self.relu(self.conv(self.quant(x)))
        x = self.add.add(x, self.dw(x))
        return self.dequant(self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)))


def _small_quantized(mode: str, tmp_path: Path) -> Artifact:
    torch.manual_seed(0)
    recipe = load_recipe(f"nnapi-{mode}")
    return build(_QuantNet().eval(), recipe, Context(input_specs=[InputSpec((1, 3, 16, 16))]),
                 tmp_path / f"q-{mode}").artifacts[0].artifact


def test_fx_quantized_model_without_stubs_converts(tmp_path):
    """A model with no QuantStub is quantized in FX graph mode, which leaves ReLU-after-BatchNorm in float between a
    dequantize and a quantize whose scale is a tensor attribute: it converts, the float island included."""
    from tests.conftest import tiny_model

    for mode, dtype in (("core", torch.float32), ("full", torch.quint8)):
        ctx = Context(input_specs=[InputSpec((1, 3, 32, 32))])
        art = build(tiny_model(), load_recipe(f"nnapi-{mode}"), ctx, tmp_path / mode).artifacts[0].artifact
        assert any("FX graph mode" in n for n in ctx.notes)
        with open_session(art) as session:
            ops = session.details()["nnapi"]["operations"]
            assert ops["DEQUANTIZE"] == ops["QUANTIZE"] == ops["RELU"] == 1
            assert session.run(session.bundled_inputs()[0])[0].dtype == dtype
        assert any("host check" in n and "SQNR" in n for n in art.notes)


def test_host_check_fails_when_an_operation_computes_something_else(tmp_path, monkeypatch):
    """The check is not a formality: an ADD kernel one step off is caught and named."""
    from mobilize.backends.nnapi import interpreter as interp

    assert _small_quantized("core", tmp_path / "ok").path.exists()
    right = interp.KERNELS["ADD"]
    monkeypatch.setitem(interp.KERNELS, "ADD", lambda a, i, o: (right(a, i, o) + 2).clamp(0, 255))
    with pytest.raises(AccuracyError, match=r"worst ADD #\d+ at") as info:
        _small_quantized("core", tmp_path / "bad")
    assert float(re.search(r"worst ADD #\d+ at ([\d.]+)%", str(info.value)).group(1)) < 50


def test_exporter_states_what_it_needs():
    exporter = EXPORTERS.get("nnapi")
    float_ctx = Context(input_specs=[InputSpec(SMALL)])
    with pytest.raises(ConfigError, match="add `quantize"):
        exporter(NnapiConfig(mode="core")).requires(float_ctx)
    int8 = QuantState(quantized=True, engine="qnnpack", interface="core", mode="static")
    with pytest.raises(ConfigError, match="drop the quantize step"):
        exporter(NnapiConfig(mode="none")).requires(Context(input_specs=[InputSpec(SMALL)], quant=int8))
    per_channel = dataclasses.replace(int8, engine="x86")
    with pytest.raises(ConfigError, match="engine: qnnpack"):
        exporter(NnapiConfig(mode="full")).requires(Context(input_specs=[InputSpec(SMALL)], quant=per_channel))
    with pytest.raises(ConfigError, match="mode core's twin"):
        exporter(NnapiConfig(mode="full", artifact="cpu_twin")).requires(Context(input_specs=[InputSpec(SMALL)],
                                                                                 quant=int8))
    dynamic = dataclasses.replace(int8, mode="dynamic")
    with pytest.raises(ConfigError, match="static"):
        exporter(NnapiConfig(mode="core")).requires(Context(input_specs=[InputSpec(SMALL)], quant=dynamic))


def test_interpreter_refuses_an_operation_it_has_no_kernel_for(exported):
    from mobilize.backends.nnapi.interpreter import Interpreter

    payload = fmt.read_pipeline(torch.jit.load(str(exported["none"].path))).payload
    words = payload.ser_model.clone()
    model = fmt.parse_model(words)
    first_op = 6 + 4 * len(model.operands) + 3 * len(model.values)
    words[first_op] = 16  # ANEURALNETWORKS_LSTM
    with pytest.raises(UnsupportedModelError, match=r"no kernel for LSTM \(opcode 16\)"):
        Interpreter(fmt.parse_model(words), payload.weights)


def test_nnapi_rounding_rules():
    """NNAPI's reference arithmetic, not torch's: halves away from zero, and fixed-point requantization that
    rounds twice (-72.4994 -> -73 where a float requantization gives -72)."""
    from mobilize.backends.nnapi.interpreter import (KERNELS, multiply_by_quantized_multiplier,
                                                      quantize_multiplier, quantize_tensor)

    op = fmt.Operand(fmt.TENSOR_QUANT8_ASYMM, (4,), 0.5, 10)
    assert quantize_tensor(torch.tensor([0.25, -0.25, 0.75, 200.0]), op).tolist() == [11, 9, 12, 255]
    q, shift = quantize_multiplier(1958718094 * 2.0 ** -40)
    assert multiply_by_quantized_multiplier(torch.tensor([-40697]), q, shift).item() == -73
    assert round(-40697 * 1958718094 * 2.0 ** -40) == -72
    f = fmt.Operand(fmt.TENSOR_FLOAT32, (8,), 0.0, 0)
    x = torch.linspace(-4, 4, 8)
    torch.testing.assert_close(KERNELS["HARD_SWISH"]([x], [f], [f]), nn.functional.hardswish(x))


LOG = """\
Starting benchmark.
Running warmup runs.
Main runs.
PyTorchObserver {"type": "NET", "unit": "us", "metric": "latency", "value": "8123"}
PyTorchObserver {"type": "NET", "unit": "us", "metric": "latency", "value": "8097"}
PyTorchObserver {"type": "NET", "unit": "us", "metric": "latency", "value": "8250"}
PyTorchObserver {"type": "NET", "unit": "us", "metric": "latency", "value": "8311"}
PyTorchObserver {"type": "NET", "unit": "us", "metric": "latency", "value": "7920"}
Main run finished. Microseconds per iter: 8150.6. Iters per second: 122.69
"""


def test_from_log_parses_a_speed_benchmark_torch_run(exported, run_cli, tmp_path):
    log = tmp_path / "m.nnapi.ptl.log"
    log.write_text(LOG.replace("\n", "\r\n"))  # adb shell output keeps carriage returns
    model = exported["none"].path
    code, out, err = run_cli("bench", "--from-log", log, "--model", model, "--pthreadpool_size", "1",
                             "--use_bundled_input", "0", "--warmup", "5", "--iter", "5", "--json", tmp_path / "r.json")
    assert code == 0, err
    assert "Main run finished. Microseconds per iter: 8150.6. Iters per second: 122.69" in out
    report = json.loads((tmp_path / "r.json").read_text())
    twin = fmt.nnapi_twin_path(model)  # the same JSON as the Python harness writes: every key it writes is here
    code, _, err = run_cli("bench", twin, "--use_bundled_input", "0", "--iter", "2", "--warmup", "0", "--json",
                           tmp_path / "harness.json")
    assert code == 0, err
    assert sorted(set(json.loads((tmp_path / "harness.json").read_text())) - set(report)) == []
    assert [f for f in JSON_FIELDS if f not in report] == []
    assert report["format"] == "nnapi" and report["runtime"] == "speed_benchmark_torch (device)"
    assert report["iterations"] == 5 and report["threads"] == 1 and report["warmup"] == 5
    assert report["input_source"] == "bundled:0" and report["size_bytes"] == model.stat().st_size
    assert report["latency_ms_p50"] == pytest.approx(8.123) and report["latency_ms_min"] == pytest.approx(7.92)
    assert report["latency_ms_max"] == pytest.approx(8.311) and report["latency_ms_mean"] == pytest.approx(8.1402)
    assert report["us_per_iter"] == pytest.approx(8150.6) and report["iters_per_s"] == pytest.approx(122.69, rel=1e-4)
    assert report["load_ms"] is None and report["peak_rss_mb"] is None


def test_from_log_without_per_iteration_lines_keeps_the_mean_only(run_cli, tmp_path):
    log = tmp_path / "plain.log"
    log.write_text("\n".join(ln for ln in LOG.splitlines() if "PyTorchObserver" not in ln) + "\n")
    code, out, err = run_cli("bench", "--from-log", log, "--iter", "200", "--json", tmp_path / "r.json")
    assert code == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["latency_ms_mean"] == pytest.approx(8.1506) and report["latency_ms_p50"] is None
    assert report["iterations"] == 200 and any("--report_pep" in n for n in report["notes"])


def test_from_log_refuses_an_incomplete_run(run_cli, tmp_path):
    log = tmp_path / "crashed.log"
    log.write_text("Starting benchmark.\nRunning warmup runs.\nterminate called after throwing an instance of "
                   "'c10::Error'\n  what():  Failed to load libneuralnetworks.so\n")
    code, out, err = run_cli("bench", "--from-log", log)
    assert code == 2 and "no 'Main run finished" in err and "libneuralnetworks" in err


@pytest.mark.slow
def test_mobilenet_v2_224_converts_in_all_three_modes(tmp_path):
    from mobilize.zoo import ZOO

    model = ZOO.get("mobilenet_v2").build()
    for mode in ("none", "core", "full"):
        ctx = Context(input_specs=[InputSpec((1, 3, 224, 224))])
        art = build(model, load_recipe(f"nnapi-{mode}"), ctx, tmp_path / f"m224-{mode}").artifacts[0].artifact
        assert Artifact.from_file(art.path).format == "nnapi"
        with open_session(art) as session:
            out = session.run(session.bundled_inputs()[0])[0]
        assert tuple(out.shape) == (1, 1000) and out.dtype == (torch.quint8 if mode == "full" else torch.float32)
