"""Files checked inside the arm64 root under QEMU (``scripts/setup-arm64.sh`` builds it): run with
``pytest -m arm64 tests/arm64``.  Each asserts, from the child's own report, that its numbers were computed on
aarch64 (``platform.machine()`` inside the root) with the features of the CPU model asked for, so a result
computed on the host and relabelled fails here."""

from __future__ import annotations

import pytest

from mobilize.arm64.run import missing
from tests.arm64.arm64_files import RECIPES

pytestmark = [pytest.mark.arm64, pytest.mark.skipif(missing() is not None, reason=f"arm64: {missing()}")]


@pytest.fixture(scope="module")
def checked(built) -> dict:
    """Every file on 4 sample photos: once on the host, once in the arm64 root (cortex-a76), one child each."""
    from mobilize.arm64.run import run_children
    from mobilize.arm64.verdict import check_outputs
    from mobilize.sources.data import open_data
    from mobilize.core.inputs import InputSpec
    from tests.conftest import INPUT_SHAPE

    xs, _ = open_data("sample-photos").labelled_sample_lists([InputSpec(INPUT_SHAPE)], 4)
    files = [(built[name], None) for name in RECIPES]
    hosts = run_children(files, xs, on="host", timeout_s=600)
    arms = run_children(files, xs, on="arm64", cpu="cortex-a76", timeout_s=1800)
    out = {}
    for name, host, arm in zip(RECIPES, hosts, arms):
        assert host.error is None and arm.error is None, (name, host.error, arm.error)
        kind = {"int8": "quantized", "dynamic": "quantized", "fp16": "reduced"}.get(name.split("-")[1], "float")
        # judged against the host run of the same file: the arm64 kernels vs the host's, to the kind's promise
        out[name] = {**check_outputs(arm.outputs, host.outputs, host.outputs, None, kind, machine=arm.machine)
                     .to_json(), "kind": kind, "host_machine": host.machine}
    return out


@pytest.mark.parametrize("recipe", RECIPES)
def test_file_runs_on_arm64_kernels(checked, recipe):
    result = checked[recipe]
    assert result["machine"] == "aarch64" and result["host_machine"]["machine"] == "x86_64"
    assert result["qemu_cpu"] == "cortex-a76"
    assert result["cpu_features"]["fp16"] and result["cpu_features"]["dotprod"] and not result["cpu_features"]["i8mm"]
    assert result["versions"]["torch"] == "2.13.0" and result["versions"]["numpy"] == "2.4.6"
    assert result["outcome"] == "OK", result["verdict"]["reason"]
    assert result["agreement_with_host"]["top1_agreement"] == 1.0
    floor = {"float": 60, "reduced": 30, "quantized": 8}[result["kind"]]
    agree = result["agreement_with_host"]
    assert agree["exact"] or agree["sqnr_db"] > floor, agree


def test_cpu_model_decides_the_reported_features(built):
    import torch

    from mobilize.arm64.run import run_child

    run = run_child(built["onnx-fp32"], [[torch.zeros(1, 3, 32, 32)]], on="arm64", cpu="max", timeout_s=900)
    assert run.machine["machine"] == "aarch64" and run.machine["qemu_cpu"] == "max"
    features = run.machine["cpu_features"]
    assert features["fp16"] and features["dotprod"] and features["i8mm"] and features["bf16"]


def test_verify_cli_against_the_float_model_on_arm64(built, run_cli, tmp_path):
    """``mobilize verify FILE --on arm64 --model REF``: both runs judged against the float model's outputs."""
    import json

    code, out, err = run_cli("verify", built["onnx-fp32"], "--on", "arm64", "--model", "tests.conftest:tiny_model",
                             "--samples", "2", "--json", tmp_path / "v.json")
    assert code == 0, err
    result = json.loads((tmp_path / "v.json").read_text())
    assert result["against"] == "the float model tests.conftest:tiny_model" and result["samples"] == 2
    assert result["machine"] == "aarch64" and result["host_machine"]["machine"] == "x86_64"
    assert result["outcome"] == "OK" and result["host_verdict"]["outcome"] == "OK", out
    assert "arm64 ran on aarch64" in out and "is not latency" in out


def test_a_stateful_model_is_not_judged_on_arm64_single_calls(run_cli, tmp_path):
    """A stateful model's verdict is over a stream with its state carried; the arm64 child runs one call per sample,
    so compare says the arm64 check was not made rather than judge single calls against a stream."""
    import json
    import warnings

    from tests.user_models import write_vad_npz, write_vad_onnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_vad_onnx(tmp_path / "vad.onnx")
    write_vad_npz(tmp_path / "vad.npz")
    code, out, err = run_cli("compare", tmp_path / "vad.onnx", "--input", "sr=16000", "--data", tmp_path / "vad.npz",
                             "--variant", "onnx-dynamic", "--verify-on", "arm64", "--rounds", "1", "--time-budget", "1",
                             "-o", tmp_path / "c")
    assert code == 0, err
    [v] = [v for v in json.loads((tmp_path / "c" / "report.json").read_text())["variants"] if v["name"] == "onnx-dynamic"]
    assert v["verdict"]["rule"] == "budget-stream" and not v.get("arm64")
    assert any(n.startswith("arm64: not checked: this model is stateful") for n in v["notes"])
    assert "arm64: not checked" in out
