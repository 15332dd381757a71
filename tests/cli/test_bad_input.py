"""Every bad input: one clear line on stderr, exit code 2, no traceback (unless --debug)."""

from __future__ import annotations

import os

import pytest
import torch

from tests.conftest import assert_one_line_error, tiny_model


def test_missing_file(run_cli, tmp_path):
    assert_one_line_error(*run_cli("bench", tmp_path / "nope.pt")[::2], "model file not found", "nope.pt")


def test_unknown_suffix(run_cli, tmp_path):
    (tmp_path / "model.mlmodel").write_bytes(b"x")
    assert_one_line_error(*run_cli("bench", tmp_path / "model.mlmodel")[::2], "unknown model file suffix '.mlmodel'", ".onnx")


@pytest.mark.parametrize("suffix,fragment", [
    (".pt", "not a valid TorchScript file"),
    (".ptl", "not a valid TorchScript file"),
    (".pte", "not an ExecuTorch program"),
    (".onnx", "ONNX Runtime could not load"),
    (".pt2", "not a valid ExportedProgram"),
])
def test_corrupt_file(run_cli, run_cli_process, tmp_path, suffix, fragment):
    path = tmp_path / f"corrupt{suffix}"
    path.write_bytes(os.urandom(4096))
    run = run_cli_process if suffix == ".pte" else run_cli  # a corrupt .pte would abort the process
    assert_one_line_error(*run("bench", path, "--input_dims", "1,3,32,32")[::2], fragment)


def test_input_spec_wrong_channels(run_cli):
    code, _, err = run_cli("bench", "zoo:mobilenet_v2", "--input_dims", "1,1,64,64", "--iter", "1")
    assert_one_line_error(code, err, "1,1,64,64", "expected input[1, 1, 64, 64] to have 3 channels")


def test_input_spec_wrong_rank(run_cli):
    code, _, err = run_cli("bench", "zoo:conv_bn_relu", "--input_dims", "1,3", "--iter", "1")
    assert_one_line_error(code, err, "the model failed on inputs [1,3 float32]")


@pytest.mark.parametrize("fmt", ["executorch", "onnx"])
def test_input_spec_checked_against_artifact(run_cli_process, artifacts, fmt):
    code, _, err = run_cli_process("bench", artifacts[fmt], "--input_dims", "1,1,32,32", "--iter", "1")
    assert_one_line_error(code, err, "input 0 has shape 1,1,32,32 but the model expects 1,3,32,32")


@pytest.mark.parametrize("dims,fragment", [
    ("1,3,x", "bad --input_dims '1,3,x'"),
    ("1,-3,4", "dimensions must be positive"),
    ("", "--input_dims is empty"),
])
def test_bad_input_dims(run_cli, dims, fragment):
    assert_one_line_error(*run_cli("bench", "zoo:conv_bn_relu", "--input_dims", dims)[::2], fragment)


def test_bad_input_type(run_cli):
    code, _, err = run_cli("bench", "zoo:conv_bn_relu", "--input_dims", "1,3,8,8", "--input_type", "quaternion")
    assert_one_line_error(code, err, "bad --input_type 'quaternion'", "int64")


def test_type_count_mismatch(run_cli):
    code, _, err = run_cli("bench", "zoo:conv_bn_relu", "--input_dims", "1,3,8,8;1,10", "--input_type", "float;int64;uint8")
    assert_one_line_error(code, err, "--input_type has 3 entries but --input_dims has 2")


def test_unknown_zoo_name_suggests_closest(run_cli):
    code, _, err = run_cli("bench", "zoo:mobilenet_v3")
    assert_one_line_error(code, err, "unknown zoo model 'mobilenet_v3'", "did you mean: mobilenet_v2")


def test_unknown_runtime(run_cli):
    code, _, err = run_cli("bench", "zoo:conv_bn_relu", "--runtime", "onnxrt")
    assert_one_line_error(code, err, "unknown runtime 'onnxrt'", "did you mean: onnxruntime")


def test_pickled_module_refused_without_consent(run_cli, tmp_path):
    path = tmp_path / "pickled.pt"
    torch.save(tiny_model(), path)
    code, _, err = run_cli("bench", path, "--input_dims", "1,3,32,32")
    assert_one_line_error(code, err, "pickled Python object", "arbitrary code", "--trust-pickle")
    code, out, err = run_cli("bench", path, "--input_dims", "1,3,32,32", "--trust-pickle", "--iter", "2")
    assert code == 0, err
    assert "Main run finished" in out


def test_pickled_state_dict_explained(run_cli, tmp_path):
    path = tmp_path / "weights.pt"
    torch.save(tiny_model().state_dict(), path)
    code, _, err = run_cli("bench", path, "--trust-pickle", "--input_dims", "1,3,32,32")
    assert_one_line_error(code, err, "holds a state_dict")


def test_dynamic_onnx_needs_input_dims(run_cli, tmp_path):
    path = tmp_path / "dyn.onnx"
    torch.onnx.export(tiny_model(), (torch.randn(1, 3, 32, 32),), str(path), dynamo=False,
                      input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    assert_one_line_error(*run_cli("bench", path)[::2], "dynamic dimensions", "x ['batch', 3, 32, 32]", "--input_dims")
    code, out, err = run_cli("bench", path, "--input_dims", "4,3,32,32", "--iter", "2")
    assert code == 0, err


def test_debug_shows_traceback(run_cli):
    code, _, err = run_cli("--debug", "bench", "zoo:mobilenet_v3")
    assert code == 2
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("mobilize: error:")


def test_bad_python_reference(run_cli, tmp_path):
    (tmp_path / "m.py").write_text("class NotAModel:\n    pass\n")
    assert_one_line_error(*run_cli("bench", f"{tmp_path / 'm.py'}:NotAModel")[::2], "not a torch.nn.Module")
    assert_one_line_error(*run_cli("bench", f"{tmp_path / 'm.py'}:Missing")[::2], "has no 'Missing'", "NotAModel")
