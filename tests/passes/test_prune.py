"""The prune pass: structured channel pruning (ratio, multiples of 8, residual adds, concatenation,
export to ExecuTorch and ONNX), unstructured sparsity reported exactly, fine-tuning and its data rules."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from mobilize.core.config import build_config
from mobilize.core.context import Context
from mobilize.core.errors import ConfigError
from mobilize.passes import PASSES
from mobilize.passes.prune import PruneConfig
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec
from mobilize.zoo import ZOO

pytest.importorskip("torch_pruning")


def prune(module: nn.Module, ctx: Context, **options) -> nn.Module:
    return PASSES.get("prune")(PruneConfig(**options))(module, ctx)


def macs(module: nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module.eval()(x)
    return counter.get_total_flops() // 2


def params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def channel_counts(module: nn.Module) -> list[int]:
    counts = []
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            counts += [m.in_channels, m.out_channels]
        elif isinstance(m, nn.Linear):
            counts.append(m.in_features)
    return counts


class Branchy(nn.Module):
    """Residual adds, a concatenation of two branches, a depthwise conv, BatchNorm and a final Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.a = nn.Sequential(nn.Conv2d(32, 48, 1, bias=False), nn.BatchNorm2d(48), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), nn.BatchNorm2d(32),
                               nn.Conv2d(32, 40, 1, bias=False), nn.BatchNorm2d(40), nn.ReLU())
        self.merge = nn.Sequential(nn.Conv2d(88, 64, 1, bias=False), nn.BatchNorm2d(64))
        self.skip = nn.Sequential(nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64))
        self.res = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64))
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.merge(torch.cat([self.a(x), self.b(x)], dim=1)) + self.skip(x)  # concat, then a residual add
        y = torch.relu(y + self.res(y))  # a second residual add on the same channels
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def branchy() -> nn.Module:
    torch.manual_seed(0)
    return Branchy().eval()


# -- structured ----------------------------------------------------------------------------------
def test_structured_30_percent_on_mobilenet_v2_residual_adds():
    """zoo:mobilenet_v2 (residual adds through FloatFunctional, depthwise convs, the final Linear):
    30% fewer MACs and parameters (within 5 points), channels multiples of 8, outputs keep their shape."""
    model = ZOO.get("mobilenet_v2").build()
    x = torch.randn(1, 3, 64, 64)
    macs_before, params_before = macs(model, x), params(model)
    ctx = Context(input_specs=[InputSpec((1, 3, 64, 64))])
    pruned = prune(model, ctx, method="structured", ratio=0.3)

    macs_cut = 100 * (1 - macs(pruned, x) / macs_before)
    params_cut = 100 * (1 - params(pruned) / params_before)
    assert abs(macs_cut - 30) <= 5 and abs(params_cut - 30) <= 5, (macs_cut, params_cut)
    assert all(c % 8 == 0 for c in channel_counts(pruned) if c != 3), channel_counts(pruned)
    assert params(model) == params_before, "the input model must not be modified"
    with torch.no_grad():
        for size in (64, 80):  # every residual add still lines up, at any input size
            assert pruned(torch.randn(2, 3, size, size)).shape == (2, 1000)

    d = ctx.details["prune"]
    assert (d["macs_before"], d["macs_after"]) == (macs_before, macs(pruned, x))
    assert (d["params_before"], d["params_after"]) == (params_before, params(pruned))
    assert d["macs_reduction_percent"] == pytest.approx(macs_cut) and d["dense_runtimes_faster"]
    assert d["kept_whole"] == {"classifier.1": "its outputs are the model's outputs"}
    rows = d["layers"]
    assert rows["features.1.conv.0.0"]["out_channels_before"] == 32
    assert rows["features.1.conv.0.0"]["out_channels_after"] < 32
    assert d["channels_after"] < d["channels_before"]
    assert any("BatchNorm statistics were not re-estimated" in n for n in ctx.notes)


def test_structured_prunes_concat_and_residual_consistently():
    model = branchy()
    ctx = Context(input_specs=[InputSpec((1, 3, 32, 32))], data=open_data("digits:train"))
    pruned = prune(model, ctx, ratio=0.4, bn_samples=64)
    m = dict(pruned.named_modules())
    a_out, b_out = m["a.0"].out_channels, m["b.2"].out_channels
    assert a_out < 48 and b_out < 40, "both concatenated branches narrowed"
    assert m["merge.0"].in_channels == a_out + b_out, "the conv after the concat reads exactly both branches"
    assert m["b.0"].groups == m["b.0"].in_channels == m["b.0"].out_channels == m["stem.0"].out_channels
    coupled = {m["merge.0"].out_channels, m["skip.0"].out_channels, m["res.0"].out_channels, m["fc"].in_features}
    assert len(coupled) == 1, "the residual adds keep one channel count"
    assert all(c % 8 == 0 for c in channel_counts(pruned) if c != 3), channel_counts(pruned)
    with torch.no_grad():
        assert pruned(torch.randn(4, 3, 32, 32)).shape == (4, 10)
    assert ctx.details["prune"]["bn_recalibration_samples"] == 64
    assert abs(ctx.details["prune"]["macs_reduction_percent"] - 40) <= 5


def test_structured_model_exports_to_executorch_and_onnx_and_runs(tmp_path):
    """The built-in recipe prune-structured (+ an ONNX export) on the branchy model: both files load, run
    and match the pruned model."""
    from mobilize.pipeline.build import build, verify_artifact
    from mobilize.pipeline.recipe import Recipe, load_recipe
    from mobilize.runtimes.base import open_session

    recipe = load_recipe("prune-structured")
    recipe = dataclasses.replace(recipe, exports=recipe.exports + Recipe.from_dict({"exports": ["onnx"]}).exports)
    spec = InputSpec((1, 3, 32, 32))
    ctx = Context(input_specs=[spec], data=open_data("digits:train"))
    result = build(branchy(), recipe, ctx, tmp_path / "pruned")
    assert ctx.details["prune"]["macs_reduction_percent"] == pytest.approx(30, abs=5)
    assert sorted(b.artifact.path.suffix for b in result.artifacts) == [".onnx", ".pte"]
    x = open_data("digits:test").samples(spec, 1)[0]
    for built in result.artifacts:
        with open_session(built.artifact) as session:
            assert session.run([x])[0].shape == (1, 10)
        verdict = verify_artifact(built, result.module, result.context)
        assert verdict.ok, (built.artifact.path.name, verdict)


def unlabelled_npz(tmp_path) -> str:
    import numpy as np

    path = tmp_path / "unlabelled.npz"
    np.savez(path, x=np.random.default_rng(0).standard_normal((16, 3, 32, 32)).astype(np.float32))
    return str(path)


@pytest.mark.parametrize("labelled", [True, False])
def test_data_importance_uses_taylor_or_activations(labelled, tmp_path):
    data = "digits:train" if labelled else unlabelled_npz(tmp_path)
    ctx = Context(input_specs=[InputSpec((1, 3, 32, 32))], data=open_data(data))
    pruned = prune(branchy(), ctx, ratio=0.3, importance="data", importance_samples=16, bn_samples=16)
    how = ctx.details["prune"]["importance_how"]
    assert how.startswith("Taylor" if labelled else "mean |activation|"), how
    assert params(pruned) < params(branchy())


# -- unstructured --------------------------------------------------------------------------------
@pytest.mark.parametrize("scope", ["global", "layer"])
def test_unstructured_reports_its_sparsity_exactly(scope):
    model = branchy()
    ctx = Context(input_specs=[InputSpec((1, 3, 32, 32))])
    pruned = prune(model, ctx, method="unstructured", ratio=0.5, scope=scope)
    d = ctx.details["prune"]
    layers = {n: m for n, m in pruned.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))}
    zeros = {n: int((m.weight == 0).sum()) for n, m in layers.items()}
    total = sum(m.weight.numel() for m in layers.values())
    assert d["zero_weights"] == sum(zeros.values()) and d["weights_after"] == total
    assert d["sparsity_percent"] == 100.0 * sum(zeros.values()) / total
    if scope == "global":
        assert sum(zeros.values()) == round(0.5 * total)
    for name, m in layers.items():
        row = d["layers"][name]
        assert row["zero_weights"] == zeros[name]
        assert row["sparsity_percent"] == 100.0 * zeros[name] / m.weight.numel()
        if scope == "layer":
            assert zeros[name] == round(0.5 * m.weight.numel())
    assert d["params_after"] == d["params_before"] and d["macs_after"] == d["macs_before"]
    assert not d["dense_runtimes_faster"]
    assert any("dense runtimes will not run this faster" in n for n in ctx.notes)
    assert not any(hasattr(m, "weight_mask") for m in pruned.modules()), "masks are made permanent"


def test_unstructured_finetune_keeps_pruned_weights_at_zero():
    ctx = Context(input_specs=[InputSpec((1, 3, 32, 32))], data=open_data("digits:train"))
    prune(branchy(), ctx, method="unstructured", ratio=0.5, scope="global", bn_samples=32,
          finetune_epochs=1, finetune_max_steps=3, finetune_samples=96, finetune_lr=1e-2)
    d = ctx.details["prune"]
    assert d["finetune"]["steps"] == 3
    assert d["zero_weights"] >= round(0.5 * d["weights_after"])


# -- fine-tuning ---------------------------------------------------------------------------------
def test_finetune_with_distillation_takes_steps_and_changes_weights():
    model = branchy()
    ctx = Context(input_specs=[InputSpec((1, 3, 32, 32))], data=open_data("digits:train"))
    tuned = prune(model, ctx, ratio=0.3, bn_samples=32, finetune_epochs=1, finetune_max_steps=4,
                  finetune_batch_size=8, distill=True, temperature=2.0)
    ft = ctx.details["prune"]["finetune"]
    assert (ft["steps"], ft["samples"], ft["distill"], ft["temperature"]) == (4, 32, True, 2.0)
    assert torch.isfinite(torch.tensor([ft["loss_first"], ft["loss_last"]])).all()
    assert any("distilled from the unpruned model" in n for n in ctx.notes)
    assert tuned.training is False


def test_finetune_is_seeded_and_leaves_the_callers_random_state_alone():
    """Dropout draws from the fine-tune's own seed: a different global RNG state gives the same weights."""
    from mobilize.passes._prune_train import FinetuneOptions, finetune

    def tuned(global_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
        x, y = torch.randn(32, 12), torch.arange(32) % 3
        torch.manual_seed(global_seed)
        finetune(model, None, [(x[:16], y[:16]), (x[16:], y[16:])], FinetuneOptions(epochs=2, lr=1e-2))
        return model[1].weight.detach().clone(), torch.rand(1)

    (w1, after1), (w2, after2) = tuned(1), tuned(2)
    assert torch.equal(w1, w2)
    torch.manual_seed(1)
    assert torch.equal(after1, torch.rand(1)) and not torch.equal(after1, after2)  # the caller's stream goes on


@pytest.mark.parametrize("labelled_data", [None, False])
def test_finetune_without_labelled_data_names_the_fix(labelled_data, tmp_path):
    data = None if labelled_data is None else open_data(unlabelled_npz(tmp_path))
    ctx = Context(input_specs=[InputSpec((1, 3, 32, 32))], data=data)
    with pytest.raises(ConfigError, match="needs labelled data") as err:
        prune(branchy(), ctx, finetune_epochs=1)
    assert "digits:train" in str(err.value) and "finetune_epochs: 0" in str(err.value)


def test_options_are_checked_and_order_is_enforced():
    with pytest.raises(ConfigError, match="ratio must be between 0 and 1"):
        build_config(PruneConfig, {"ratio": 1.5}, "prune")
    with pytest.raises(ConfigError, match="bad method"):
        build_config(PruneConfig, {"method": "channels"}, "prune")
    ctx = Context(input_specs=[InputSpec((1, 3, 32, 32))], applied=["fuse", "quantize"])
    with pytest.raises(ConfigError, match="comes after 'quantize'"):
        prune(branchy(), ctx)
    with pytest.raises(ConfigError, match="importance 'data'"):
        prune(branchy(), Context(input_specs=[InputSpec((1, 3, 32, 32))]), importance="data")


def test_recipes_and_the_compress_plan_load():
    from mobilize.plans.plan import load_plan
    from mobilize.pipeline.recipe import load_recipe

    for name, method in [("prune-structured", "structured"), ("prune-unstructured", "unstructured")]:
        recipe = load_recipe(name)
        assert recipe.passes[0].name == "prune" and recipe.passes[0].config.method == method
        assert [e.name for e in recipe.exports] == ["executorch"]
    plan = load_plan("compress")
    assert [v.name for v in plan.variants] == ["float", "unstructured-50", "structured-30", "structured-30-ft",
                                               "ptq-int8", "qat-int8", "structured-30-ft-int8"]
    assert all(v.export is not None and v.export.name == "executorch" for v in plan.variants)


# -- full size -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_structured_30_with_finetune_is_within_2_points_of_float_on_digits():
    from mobilize.accuracy.metrics import top1

    spec = InputSpec((1, 3, 96, 96))
    model = ZOO.get("digits_mobilenet_v2").build()
    test = list(open_data("digits:test").batches(spec, batch_size=64))
    ctx = Context(input_specs=[spec], data=open_data("digits:train"))
    tuned = prune(model, ctx, ratio=0.3, finetune_epochs=1, distill=True)

    def accuracy(m: nn.Module) -> float:
        with torch.no_grad():
            return top1([m(x) for x, _ in test], [y for _, y in test])

    assert accuracy(tuned) >= accuracy(model) - 2.0
    assert ctx.details["prune"]["macs_reduction_percent"] == pytest.approx(30, abs=2)
