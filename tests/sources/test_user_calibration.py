"""The user's .npz calibrates every int8 quantizer, for a two-input int64 model with an embedding and a dict
output: each int8 file built with the .npz differs from the one built on seeded random inputs (the weights
are the same, so the activation ranges differ), and its notes name the .npz, not random inputs."""

from __future__ import annotations

import importlib.util

import onnx
import pytest
from onnx import numpy_helper

from mobilize.pipeline.build import build, verify_artifact
from mobilize.core.context import Context
from mobilize.pipeline.recipe import load_recipe
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec
from tests.user_models import TOKENS, TwoInputEncoder, write_encoder_npz

SPECS = [InputSpec((1, TOKENS), "int64"), InputSpec((1, TOKENS), "int64")]
NAMES = ["input_ids", "attention_mask"]
RECIPES = ["onnx-int8", "executorch-int8", "litert-int8"] + (
    ["openvino-int8"] if importlib.util.find_spec("nncf") and importlib.util.find_spec("openvino") else [])


def _build(recipe: str, data, out):
    ctx = Context(input_specs=list(SPECS), input_names=list(NAMES), data=data)
    result = build(TwoInputEncoder().eval(), load_recipe(recipe), ctx, out / recipe)
    return result.artifacts[0], ctx


@pytest.mark.parametrize("recipe", RECIPES)
def test_int8_is_calibrated_on_the_users_npz(recipe, tmp_path):
    npz = tmp_path / "enc.npz"
    write_encoder_npz(npz)
    real, ctx = _build(recipe, open_data(str(npz)), tmp_path / "real")
    rand, _ = _build(recipe, None, tmp_path / "random")
    notes = " ".join(real.artifact.notes)
    assert "enc.npz" in notes and "seeded random" not in notes, notes
    assert "seeded random" in " ".join(rand.artifact.notes)
    assert real.artifact.path.read_bytes() != rand.artifact.path.read_bytes()
    verdict = verify_artifact(real, TwoInputEncoder().eval(), ctx)
    assert verdict.ok, verdict.reason


def test_onnx_activation_scales_come_from_the_npz(tmp_path):
    """The static int8 ONNX file's activation scales: real ids (50..99) hit other embedding rows than the
    random ones (0..9), so the ranges after the embedding differ."""
    npz = tmp_path / "enc.npz"
    write_encoder_npz(npz)

    def scales(art):
        model = onnx.load(str(art.artifact.path))
        return {i.name: float(numpy_helper.to_array(i).reshape(-1)[0]) for i in model.graph.initializer
                if i.name.endswith("_scale") and numpy_helper.to_array(i).size == 1}

    real = scales(_build("onnx-int8", open_data(str(npz)), tmp_path / "real")[0])
    rand = scales(_build("onnx-int8", None, tmp_path / "random")[0])
    shared = set(real) & set(rand)
    assert shared and any(abs(real[k] - rand[k]) > 1e-6 * max(abs(rand[k]), 1e-12) for k in shared)
