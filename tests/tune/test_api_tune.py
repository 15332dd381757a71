"""tune and verify are Python functions too (mobilize.tune, mobilize.verify), refusing what they cannot do in
one typed error before any work."""

import pytest

import mobilize
from mobilize.core.errors import BackendUnavailableError, ConfigError


def test_tune_refuses_an_engine_that_declares_no_route(tmp_path):
    with pytest.raises(ConfigError, match="tune does not search runtime 'tflite-gpu'"):
        mobilize.tune("zoo:conv_bn_relu", data="sample-photos", runtimes=("tflite-gpu",), out_dir=str(tmp_path))


def test_verify_without_an_arm64_root_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("MOBILIZE_ARM64_ROOT", str(tmp_path / "none"))
    with pytest.raises(BackendUnavailableError, match="cannot verify on arm64: no arm64 root"):
        mobilize.verify(str(tmp_path / "model.onnx"))
