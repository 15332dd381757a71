"""Files checked inside the arm64 root under QEMU (``scripts/setup-arm64.sh`` builds it): run with
``pytest -m arm64 tests/arm64``.  Each asserts, from the child's own report, that its numbers were computed on
aarch64 (``platform.machine()`` inside the root) with the features of the CPU model asked for, so a result
computed on the host and relabelled fails here."""

from __future__ import annotations

import warnings

import pytest

from mobilize.arm64.run import missing

pytestmark = [pytest.mark.arm64, pytest.mark.skipif(missing() is not None, reason=f"arm64: {missing()}")]

RECIPES = ["executorch-fp32", "executorch-int8", "executorch-fp16", "onnx-fp32", "onnx-int8", "onnx-dynamic",
           "torchscript-fp32"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    from mobilize.build import build
    from mobilize.context import Context
    from mobilize.recipe import load_recipe
    from mobilize.sources.data import open_data
    from mobilize.sources.inputs import InputSpec
    from tests.conftest import INPUT_SHAPE, tiny_model

    out = tmp_path_factory.mktemp("arm64")
    files = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in RECIPES:
            ctx = Context(input_specs=[InputSpec(INPUT_SHAPE)], data=open_data("sample-photos"))
            files[name] = build(tiny_model(), load_recipe(name), ctx, out / name).artifacts[0].artifact.path
    return files


@pytest.mark.parametrize("recipe", RECIPES)
def test_file_runs_on_arm64_kernels(built, recipe):
    from mobilize.arm64 import verify_file

    result = verify_file(str(built[recipe]), data="sample-photos", samples=4, cpu="cortex-a76", timeout_s=600)
    assert result["machine"] == "aarch64" and result["host_machine"]["machine"] == "x86_64"
    assert result["qemu_cpu"] == "cortex-a76"
    assert result["cpu_features"]["fp16"] and result["cpu_features"]["dotprod"] and not result["cpu_features"]["i8mm"]
    assert result["versions"]["torch"] == "2.13.0" and result["versions"]["numpy"] == "2.4.6"
    assert result["kind"] == {"int8": "quantized", "dynamic": "quantized", "fp16": "reduced"}.get(
        recipe.split("-")[1], "float")
    # the arm64 kernels' outputs vs the host's, judged by the file's own promise (kind floor)
    assert result["outcome"] == "OK", result["verdict"]["reason"]
    assert result["agreement_with_host"]["top1_agreement"] == 1.0
    floor = {"float": 60, "reduced": 30, "quantized": 8}[result["kind"]]
    assert result["agreement_with_host"]["sqnr_db"] is None or result["agreement_with_host"]["sqnr_db"] > floor


def test_cpu_model_decides_the_reported_features(built):
    from mobilize.arm64.run import run_child

    import torch

    xs = [[torch.zeros(1, 3, 32, 32)]]
    old = run_child(built["onnx-fp32"], xs, on="arm64", cpu="cortex-a53", timeout_s=600).machine
    new = run_child(built["onnx-fp32"], xs, on="arm64", cpu="max", timeout_s=600).machine
    assert old["machine"] == new["machine"] == "aarch64"
    assert not old["cpu_features"]["fp16"] and not old["cpu_features"]["dotprod"]
    assert new["cpu_features"]["fp16"] and new["cpu_features"]["dotprod"] and new["cpu_features"]["i8mm"]
