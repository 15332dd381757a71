"""A recipe rebuilds the same file bit for bit on the same machine (issue #47: tune's winner rebuilt one quantization
step apart on a Zen 4): every calibrated int8 recipe, built twice in one process with the caller's torch thread count
and random state changed in between, writes identical bytes.  What makes it so is
:func:`mobilize.pipeline.build.reproducible` (one torch thread, a seeded generator), ONNX Runtime's calibration on one
thread, and OpenVINO's counter-made node names renumbered."""

from __future__ import annotations

import hashlib

import pytest
import torch

from mobilize.core.context import Context
from mobilize.core.inputs import InputSpec
from mobilize.pipeline.build import build
from mobilize.pipeline.recipe import builtin_recipe_names, load_recipe
from mobilize.sources.data import open_data
from mobilize.zoo import DEFAULT_MODEL, ZOO

INT8 = [name for name in builtin_recipe_names() if name.endswith("-int8")]
"""The calibrated int8 recipes (each engine's static int8)."""


def _built_bytes(model, recipe: str, specs, data: str, stem) -> bytes:
    built = build(model, load_recipe(recipe).with_option("calibration_samples", 4),
                  Context(input_specs=list(specs), data=open_data(data)), stem)
    path = built.artifacts[0].artifact.path
    bin_path = path.with_suffix(".bin")  # OpenVINO's weights beside its .xml
    return path.read_bytes() + (bin_path.read_bytes() if bin_path.exists() else b"")


def _rebuilds_identically(model, recipe: str, specs, data: str, tmp_path) -> None:
    threads = torch.get_num_threads()
    try:
        digests = []
        for k, (count, seed) in enumerate(((2, 1), (1, 7))):  # what the process did before differs
            torch.set_num_threads(count)
            torch.manual_seed(seed)
            torch.rand(k + 3)
            digests.append(hashlib.sha256(_built_bytes(model, recipe, specs, data, tmp_path / f"b{k}")).hexdigest())
    finally:
        torch.set_num_threads(threads)
    assert digests[0] == digests[1], recipe


def test_the_int8_recipes_are_known():
    assert {"onnx-int8", "executorch-int8", "openvino-int8", "litert-int8"} <= set(INT8)


@pytest.mark.parametrize("recipe", INT8)
def test_an_int8_recipe_rebuilds_the_same_file_bit_for_bit(recipe, tmp_path):
    """A small model (the default suite's budget); the default model is the slow test below."""
    _rebuilds_identically(ZOO.get("conv_bn_relu").build().eval(), recipe, [InputSpec((1, 3, 16, 16))],
                          "sample-photos:4", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", INT8)
def test_the_default_models_int8_recipes_rebuild_bit_for_bit(recipe, tmp_path):
    entry = ZOO.get(DEFAULT_MODEL)
    _rebuilds_identically(entry.build().eval(), recipe, entry.input_specs, "digits:train", tmp_path)


def test_a_build_runs_on_one_thread_with_a_seeded_generator():
    from mobilize.pipeline.build import reproducible

    threads = torch.get_num_threads()
    torch.manual_seed(123)
    torch.rand(1)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    torch.rand(1)
    try:
        torch.set_num_threads(2)
        with reproducible():
            inside = (torch.get_num_threads(), torch.rand(3))
        with reproducible():
            again = torch.rand(3)
        assert inside[0] == 1 and torch.equal(inside[1], again)
        assert torch.get_num_threads() == 2 and torch.equal(torch.rand(1), expected_next)  # the caller's state goes on
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("target", ["x86-avx2", "x86-vnni"])
def test_what_the_target_decided_is_written_into_the_recipe_that_rebuilds_the_file(target, tmp_path):
    """tune --target x86-avx2 turned ONNX Runtime's reduce_range on, and its recipe left it to the target: rebuilt on
    this machine (target host) it came out with 8-bit weights, one quantization step from the winner.  The recipe as
    built (and in the file's manifest) now says reduce_range, and rebuilds the file bit for bit on any target."""
    from mobilize.core.artifact import Artifact
    from mobilize.core.target import Target

    model, specs = ZOO.get("conv_bn_relu").build().eval(), [InputSpec((1, 3, 16, 16))]
    recipe = load_recipe("onnx-int8").with_option("calibration_samples", 4)
    first = build(model, recipe, Context(input_specs=specs, data=open_data("sample-photos:4"),
                                         target=Target.parse(target)), tmp_path / "first")
    (step,) = first.recipe.exports
    assert step.config.reduce_range is Target.parse(target).reduce_range
    art = first.artifacts[0].artifact
    assert Artifact.from_file(art.path).recipe["exports"][0]["onnx"]["reduce_range"] is step.config.reduce_range
    again = build(model, first.recipe, Context(input_specs=specs, data=open_data("sample-photos:4")), tmp_path / "again")
    assert again.artifacts[0].artifact.path.read_bytes() == art.path.read_bytes()
