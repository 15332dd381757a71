"""The default plan fits the model: dynamic int8 for a Linear/embedding model with int64 inputs (whose eager
static int8 and channels-last cannot apply, each left out with its reason); a conv net keeps static int8."""

from __future__ import annotations

import pytest

from mobilize.plans.plan import load_plan
from mobilize.plans.fit import fit_plan, layer_counts
from tests.conftest import tiny_model
from tests.user_models import TwoInputEncoder


def test_linear_embedding_model_gets_dynamic_int8_and_reasons():
    facts = {"layers": layer_counts(TwoInputEncoder()), "input_types": ["int64", "int64"], "input_ranks": [2, 2]}
    plan, left_out = fit_plan(load_plan("default"), facts)
    names = [v.name for v in plan.variants]
    assert {"onnx-dynamic", "executorch-int8-dynamic", "onnx-int8", "executorch-int8"} <= set(names)
    reasons = dict(left_out)
    assert set(reasons) == {"channels-last", "eager-int8-x86", "eager-int8-qnnpack"}
    assert "int64" in reasons["eager-int8-x86"] and "4-D" in reasons["channels-last"]
    dyn = next(v for v in plan.variants if v.name == "executorch-int8-dynamic")
    assert dyn.export.config.quantize == "int8_dynamic"


def test_conv_net_keeps_the_default_plan():
    facts = {"layers": layer_counts(tiny_model()), "input_types": ["float"], "input_ranks": [4]}
    plan, left_out = fit_plan(load_plan("default"), facts)
    assert left_out == [] and [v.name for v in plan.variants] == [v.name for v in load_plan("default").variants]


def test_a_variant_the_fitted_default_plan_adds_can_be_asked_for_by_name():
    """`--variant onnx-dynamic` was refused ("unknown variant") though fitting the default plan adds it for a
    Linear model (#40)."""
    from mobilize.compare.entry import _load_plan

    plan, _ = _load_plan("zoo:tiny", "default", ["onnx-dynamic", "onnx-fp32"], "eager")
    assert [v.name for v in plan.variants] == ["onnx-fp32", "onnx-dynamic"]
    with pytest.raises(Exception, match="unknown variant 'onnx-dynamic' in plan 'quick'"):
        _load_plan("zoo:tiny", "quick", ["onnx-dynamic"], "eager")
