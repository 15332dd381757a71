"""The files the arm64 tests run, built once per session from the tiny test model (shared by the Python-child
checks and the native aarch64 programs).  Not a conftest.py: a second conftest module without a package
replaces ``tests/conftest.py`` in sys.modules, and ``from conftest import ...`` elsewhere then fails; tests/conftest.py
loads it as a plugin (``pytest_plugins``), so its session fixture is built once, and only when an arm64 test asks."""

from __future__ import annotations

import warnings

import pytest

RECIPES = ["executorch-fp32", "executorch-int8", "executorch-fp16", "onnx-fp32", "onnx-int8", "onnx-dynamic",
           "torchscript-fp32", "lite-fp32"]
"""Built-in recipes, and ``lite-fp32``: the lite-interpreter file (.ptl) that ``_recipe`` spells out."""


def _recipe(name: str):
    from mobilize.pipeline.recipe import Recipe, load_recipe

    if name == "lite-fp32":
        return Recipe.from_dict({"name": name, "passes": ["fuse"], "exports": [{"lite": {"optimize": "none"}}]})
    return load_recipe(name)


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict:
    from mobilize.pipeline.build import build
    from mobilize.core.context import Context
    from mobilize.sources.data import open_data
    from mobilize.core.inputs import InputSpec
    from tests.conftest import INPUT_SHAPE, tiny_model

    out = tmp_path_factory.mktemp("arm64")
    files = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in RECIPES:
            ctx = Context(input_specs=[InputSpec(INPUT_SHAPE)], data=open_data("sample-photos"))
            files[name] = build(tiny_model(), _recipe(name), ctx, out / name).artifacts[0].artifact.path
    return files
