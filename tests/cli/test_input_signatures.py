"""Input signatures as users have them, through the one input-spec syntax of every command: several inputs,
int64 and scalar (0-d) tensors, a Python ``int`` forward argument bound by name (``--input sr=16000``) and
recorded in manifests, ``.jit`` files read as TorchScript, shapes printed as ``()`` and ``(1,128)``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mobilize.core.inputs import parse_input_specs
from tests.conftest import NO_RACE, assert_one_line_error
from tests.user_models import ScalarVad, write_encoder_npz

VAD = f"{Path(__file__).parents[1] / 'user_models.py'}:ScalarVad"
ENCODER = f"{Path(__file__).parents[1] / 'user_models.py'}:TwoInputEncoder"
VAD_INPUTS = ("--input_dims", "1,32;()", "--input_type", "float;float", "--input", "sr=16000")


def test_scalar_shapes_parse_and_print():
    specs = parse_input_specs("(1,128);();1,3", "int64;float;bool")
    assert [s.shape for s in specs] == [(1, 128), (), (1, 3)]
    assert [str(s) for s in specs] == ["(1,128) int64", "() float", "(1,3) bool"]


def test_scalar_input_and_int_argument_bench_and_optimize(run_cli, tmp_path):
    code, out, _ = run_cli("bench", VAD, *VAD_INPUTS, "--iter", "3", "--warmup", "0", "--json", tmp_path / "b.json")
    assert code == 0 and "sr=16000" in out
    assert json.loads((tmp_path / "b.json").read_text())["input_specs"][1]["shape"] == []
    code, out, _ = run_cli("optimize", VAD, *VAD_INPUTS, "--recipe", "onnx-fp32", "-o", tmp_path / "o")
    assert code == 0 and "verified" in out, out
    manifest = json.loads(next((tmp_path / "o").glob("*.onnx.manifest.json")).read_text())
    assert manifest["bound_args"] == {"sr": 16000}
    assert manifest["input_specs"][1]["shape"] == []
    import onnxruntime as ort

    onnx_file = next((tmp_path / "o").glob("*.onnx"))
    x, gain = torch.randn(1, 32), torch.tensor(0.7)
    got = ort.InferenceSession(str(onnx_file)).run(None, {i.name: t.numpy() for i, t in zip(
        ort.InferenceSession(str(onnx_file)).get_inputs(), (x, gain))})[0]
    # the file computes the sr=16000 branch (scale 1.0), not the forward's default sr=8000 (scale 0.5)
    torch.testing.assert_close(torch.from_numpy(got), ScalarVad().eval()(x, gain, sr=16000), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(torch.from_numpy(got), ScalarVad().eval()(x, gain), atol=1e-3)


def test_scalar_input_and_int_argument_compare(run_cli, tmp_path):
    code, out, err = run_cli("compare", VAD, *VAD_INPUTS, "--variant", "eager-fp32", "--variant", "onnx-fp32",
                             "--rounds", "1", "--iter", "3", "--accuracy-samples", "4", *NO_RACE, "-o", tmp_path / "c")
    assert code == 0, err
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    assert report["bound_args"] == {"sr": 16000}
    assert {r["name"]: r["outcome"] for r in report["variants"]} == {"eager-fp32": "OK", "onnx-fp32": "OK"}


def test_bench_data_npz_on_a_two_input_model(run_cli, tmp_path):
    npz = tmp_path / "enc.npz"
    write_encoder_npz(npz)
    code, out, err = run_cli("bench", ENCODER, "--input_dims", "1,12;1,12", "--input_type", "int64;int64",
                             "--data", npz, "--iter", "3", "--warmup", "0")
    assert code == 0, err
    assert "data:" in out


def test_jit_suffix_is_torchscript(run_cli, tmp_path):
    path = tmp_path / "vad.jit"
    torch.jit.trace(ScalarVad().eval(), (torch.randn(1, 32), torch.tensor(1.0))).save(str(path))
    code, out, err = run_cli("bench", path, "--input_dims", "1,32;()", "--iter", "2", "--warmup", "0")
    assert code == 0, err
    assert "torchscript" in out


@pytest.mark.parametrize("argv, fragments", [
    (("--input", "sr"), ("bad --input 'sr'", "name=value")),
    (("--input", "rate=16000"), ("no argument 'rate'", "x, gain, sr")),
    (("--input_dims", "1,32;"), ("an empty shape", '"()"')),
])
def test_bad_input_specs_are_one_line_errors(run_cli, argv, fragments):
    base = ("--input_dims", "1,32;()") if "--input_dims" not in argv else ()
    code, _, err = run_cli("bench", VAD, *base, *argv, "--iter", "1", "--warmup", "0")
    assert_one_line_error(code, err, *fragments)


def test_wrong_shape_error_prints_shapes_in_parentheses(run_cli, tmp_path):
    code, _, err = run_cli("optimize", VAD, *VAD_INPUTS, "--recipe", "onnx-fp32", "-o", tmp_path / "o")
    onnx_file = next((tmp_path / "o").glob("*.onnx"))
    code, _, err = run_cli("bench", onnx_file, "--input_dims", "1,16;()", "--iter", "1", "--warmup", "0")
    assert_one_line_error(code, err, "(1,16)", "(1,32)")


def test_tune_on_a_two_input_int64_model_finishes(run_cli, tmp_path):
    """Tune's ONNX Runtime search on token ids and masks: every candidate calibrated and judged on the .npz
    (by cosine: there are no labels), then a winner file, or exit 2 saying why nothing fits."""
    npz = tmp_path / "enc.npz"
    write_encoder_npz(npz)
    code, out, err = run_cli("tune", ENCODER, "--input_dims", "1,12;1,12", "--input_type", "int64;int64",
                             "--data", npz, "--min-cosine", "0.99", "--samples", "16", "-o", tmp_path / "t")
    assert code in (0, 2), err
    assert "cosine" in out and "top-1" not in out
    if code == 0:
        assert "winner:" in out and list((tmp_path / "t").glob("TwoInputEncoder-tune.onnx"))
    else:
        assert "no candidate meets the budget" in err
