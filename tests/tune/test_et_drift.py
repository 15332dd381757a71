"""mobilize tune, ExecuTorch route: per-layer drift of the PT2E int8 graph, and modules kept float with exclude."""

from __future__ import annotations

import json

import pytest
import torch

from mobilize.accuracy.verify import Policy
from tune_models import SPEC, digits_tensors, hostile, trained_digits_cnn


@pytest.fixture(scope="module")
def trained():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the shared test machine: one core trains it in a few seconds
    try:
        return trained_digits_cnn()
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tuned(trained, tmp_path_factory):
    """tune over the ExecuTorch route for the hostile model (plain int8 misses a 1-point budget)."""
    from mobilize.tune import tune

    out = tmp_path_factory.mktemp("et-tune")
    result = tune(hostile(trained), [SPEC], data="digits:test", calibration="digits:train",
                  policy=Policy(max_drop_points=1.0), runtimes=("executorch",), out_dir=out, stem="hostile",
                  rounds=3, iterations=10)
    return result, out


def _samples(split: str, n: int) -> list[list[torch.Tensor]]:
    return [[x] for x in digits_tensors(split, limit=n)[0].split(1)]


def test_hostile_layer_is_localised_on_the_executorch_route(trained, tuned):
    from mobilize.backends.executorch.drift import localise

    result, _ = tuned
    layers = result.layers["executorch-int8"]
    top = layers[0]
    assert top.producer == "conv1" and top.nodes == ("conv1", "conv2"), [(l.producer, l.alone_sqnr_db) for l in layers]
    others = [l for l in layers[1:] if l.alone_sqnr_db is not None]
    assert others and top.alone_sqnr_db < min(l.alone_sqnr_db for l in others) - 10
    # its own rounding looks harmless (the outlier dominates the tensor's norm): why the ablations rank
    assert top.qdq_sqnr_db > top.alone_sqnr_db + 20
    # keeping only it float buys back far more than keeping any other tensor float
    assert top.alone_float_sqnr_db > max(l.alone_float_sqnr_db for l in others) + 10
    # control: the same layer of the unmodified model quantizes well
    plain = localise(trained, [torch.zeros(SPEC.shape)], _samples("train", 32), _samples("test", 16))
    same = next(l for l in plain if l.producer == "conv1")
    assert same.alone_sqnr_db > top.alone_sqnr_db + 15


def test_keeping_the_layer_float_meets_a_budget_plain_int8_misses(tuned):
    result, out = tuned
    by_name = {c.name: c for c in result.candidates}
    plain = by_name["executorch-int8"]
    assert plain.verdict.outcome == "OVER_BUDGET", plain.lost
    fixed = [c for c in result.candidates if c.excluded and c.within_budget]
    assert fixed, [(c.name, c.lost) for c in result.candidates]
    best = fixed[0]
    assert best.kind == "quantized" and best.drop_points <= 1.0 < plain.drop_points
    assert set(result.layers["executorch-int8"][0].nodes) <= set(best.excluded)
    assert best.latency_ms_p50 is not None and len(best.round_medians_ms) == 3  # its speed cost is measured
    report = json.loads((out / "tune-report.json").read_text())
    ranked = report["layers"]["executorch-int8"]
    assert ranked[0]["producer"] == "conv1" and ranked[0]["keep_float"] == ["conv1", "conv2"]
    assert next(c for c in report["candidates"] if c["name"] == best.name)["excluded_nodes"] == list(best.excluded)


def test_exclude_keeps_the_modules_float_in_the_pte_and_the_recipe_rebuilds_it(trained, tuned, tmp_path):
    from mobilize.core.artifact import Artifact
    from mobilize.pipeline.build import build
    from mobilize.core.context import Context
    from mobilize.pipeline.recipe import dump_recipe, load_recipe
    from mobilize.runtimes.base import open_session
    from mobilize.sources.data import open_data

    result, _ = tuned
    best = next(c for c in result.candidates if c.excluded and c.within_budget)
    plain = next(c for c in result.candidates if c.name == "executorch-int8")

    def weight_dequantizes(path) -> int:
        report = json.loads(path.with_name(path.name + ".delegation.json").read_text())
        return report["delegated_by_op"].get("quantized_decomposed.dequantize_per_channel", 0)

    assert weight_dequantizes(plain.path) == 3  # conv1, conv2, fc: int8 weights in the XNNPACK delegate
    assert weight_dequantizes(best.path) == 1  # only fc: conv1 and conv2 run in float
    manifest = Artifact.from_file(best.path)
    assert manifest.recipe["exports"][0]["executorch"]["exclude"] == list(best.excluded)
    assert any("kept 2 submodule(s) in float (exclude): conv1, conv2" in n for n in manifest.notes), manifest.notes

    dump_recipe(best.recipe, tmp_path / "best.yaml")
    rebuilt = build(hostile(trained), load_recipe(str(tmp_path / "best.yaml")),
                    Context(input_specs=[SPEC], data=open_data("digits:train")), tmp_path / "rebuilt").artifacts[0]
    samples = _samples("test", 16)
    with open_session(rebuilt.artifact, threads=1) as a, open_session(Artifact.from_file(best.path), threads=1) as b:
        for x in samples:
            assert torch.allclose(a.run(x)[0], b.run(x)[0], atol=1e-6)


def test_exclude_names_must_be_submodules(trained, tmp_path):
    from mobilize.pipeline.build import build
    from mobilize.core.context import Context
    from mobilize.core.errors import ConfigError
    from mobilize.pipeline.recipe import Recipe

    recipe = Recipe.from_dict({"name": "x", "exports": [{"executorch": {"quantize": "int8", "exclude": ["conv_1"]}}]})
    with pytest.raises(ConfigError, match="no submodule named 'conv_1'.*") as err:
        build(trained, recipe, Context(input_specs=[SPEC]), tmp_path / "bad")
    assert "conv1" in (err.value.hint or "")
    float_recipe = Recipe.from_dict({"name": "y", "exports": [{"executorch": {"exclude": ["conv1"]}}]})
    with pytest.raises(ConfigError, match="quantize is none"):
        build(trained, float_recipe, Context(input_specs=[SPEC]), tmp_path / "bad2")
