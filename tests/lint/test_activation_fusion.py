"""Every claim lint makes about an activation fusing into the conv before it is true on the installed runtime:
each engine's declaration (``Backend.conv_fused_activations``) is checked here against what its own fusion
does with a Conv followed by that activation; and activations are found by what a module computes, not its
class name."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from mobilize.core.backend import BACKENDS
from mobilize.core.inputs import InputSpec
from mobilize.lint import LintConfig, lint
from mobilize.lint.activations import computed_kind

ACTIVATIONS = {"relu": nn.ReLU(), "relu6": nn.ReLU6(), "hardtanh": nn.Hardtanh(-1.0, 1.0), "sigmoid": nn.Sigmoid(),
               "tanh": nn.Tanh(), "leaky_relu": nn.LeakyReLU(0.1), "hardsigmoid": nn.Hardsigmoid(),
               "hardswish": nn.Hardswish(), "gelu": nn.GELU(), "silu": nn.SiLU(), "elu": nn.ELU()}


def _conv_then(act: nn.Module) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), act).eval(), torch.randn(1, 3, 16, 16)


def test_onnxruntime_fuses_exactly_what_it_declares(tmp_path):
    pytest.importorskip("onnxruntime")
    import onnx
    import onnxruntime as ort

    declared = set(BACKENDS.get("onnxruntime").conv_fused_activations)
    fused = set()
    for name, act in ACTIVATIONS.items():
        model, x = _conv_then(act)
        src, out = tmp_path / f"{name}.onnx", tmp_path / f"{name}.opt.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (x,), str(src), dynamo=False, opset_version=17)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(out)
        so.log_severity_level = 3
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
        nodes = onnx.load(str(out)).graph.node
        if [n.op_type for n in nodes] == ["FusedConv"] or (len(nodes) == 1 and nodes[0].op_type == "Conv"):
            fused.add(name)
    assert fused == declared, f"fused on this onnxruntime: {sorted(fused)}; declared: {sorted(declared)}"


@pytest.mark.parametrize("name", ["relu", "relu6", "hardtanh", "sigmoid", "hardswish", "gelu"])
def test_xnnpack_fuses_exactly_what_it_declares(name):
    pytest.importorskip("executorch")
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from mobilize.core.backend import profiler_for

    model, x = _conv_then(ACTIVATIONS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = to_edge_transform_and_lower(torch.export.export(model, (x,)), partitioner=[XnnpackPartitioner()])
    path = Path(tempfile.mkdtemp()) / "m.pte"
    path.write_bytes(program.to_executorch().buffer)
    profile = profiler_for("executorch")(path, [x], 1, 3, 1)
    kinds = {op.op.split(" (")[0].split(" #")[0] for op in profile.delegate_ops}
    separate = kinds - {"Convolution", "Transpose"}
    declared = name in BACKENDS.get("executorch").conv_fused_activations
    assert (not separate) == declared, (name, sorted(kinds))


class SiLUActivation(nn.Module):  # transformers' name; computes silu
    def forward(self, x):
        return x * torch.sigmoid(x)


class GELUActivation(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.erf(x / 2 ** 0.5))


class Untraceable(nn.Module):
    """Data-dependent control flow: FX cannot trace it, so lint reads its modules, not a graph."""

    def __init__(self):
        super().__init__()
        self.conv, self.act, self.head = nn.Conv2d(3, 8, 3), SiLUActivation(), GELUActivation()

    def forward(self, x):
        if x.sum() > 1e9:
            x = x * 2
        return self.head(self.act(self.conv(x)))


def test_activations_are_found_by_what_they_compute():
    assert computed_kind(SiLUActivation()) == "silu" and computed_kind(GELUActivation()) == "gelu"
    assert computed_kind(nn.Identity()) is None and computed_kind(nn.Conv2d(1, 1, 1)) is None
    report = lint(Untraceable(), LintConfig(targets=(), time=False), input_specs=[InputSpec((1, 3, 16, 16))])
    found = {f.module: f.numbers["activation"] for f in report.findings if f.rule == "activation"}
    assert found == {"act": "silu", "head": "gelu"}, found


def test_the_advice_names_what_each_engine_fuses():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Sigmoid())
    report = lint(model, LintConfig(targets=(), time=False), input_specs=[InputSpec((1, 3, 16, 16))])
    [finding] = [f for f in report.findings if f.rule == "activation"]
    assert "runs as a separate pass on XNNPACK (ExecuTorch) (fused into the conv on ONNX Runtime)" in finding.message
    assert "ReLU6 would fuse into the conv on XNNPACK (ExecuTorch) and ONNX Runtime" in finding.message
    assert "Hardswish there would fuse" not in finding.message
