"""Conv-BN pairs around Conv subclasses defined outside torch.nn (EfficientNet's depthwise conv in another
library): one that keeps nn.Conv2d's forward folds like its base; one with its own forward is not folded, and
fuse and lint both say so with the reason (before, FX traced through both and neither said a word)."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from mobilize.core.context import Context
from mobilize.core.inputs import InputSpec
from mobilize.lint import LintConfig, lint
from mobilize.passes.fuse import Fuse, FuseConfig


class KeepsForward(nn.Conv2d):
    """Another library's conv class that computes as nn.Conv2d does."""


class OwnForward(nn.Conv2d):
    """TF 'same' padding in its own forward."""

    def forward(self, x):
        return F.conv2d(F.pad(x, (1, 1, 1, 1)), self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.b2 = KeepsForward(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8)
        self.c3, self.b3 = OwnForward(8, 8, 3, groups=8), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)
        for bn in (self.b1, self.b2, self.b3):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        x = torch.relu(self.b1(self.c1(x)))
        x = torch.relu(self.b2(self.c2(x)))
        x = torch.relu(self.b3(self.c3(x)))
        return self.fc(x.mean((2, 3)))


def test_fuse_folds_a_subclass_that_keeps_its_bases_forward_and_names_the_one_it_cannot():
    model, x = Net().eval(), torch.randn(1, 3, 16, 16)
    ctx = Context(input_specs=[InputSpec((1, 3, 16, 16))])
    fused = Fuse(FuseConfig())(copy.deepcopy(model), ctx)
    assert isinstance(fused.c2, KeepsForward) and isinstance(fused.b2, nn.Identity)  # folded, class kept
    assert isinstance(fused.b3, nn.BatchNorm2d)  # not folded
    torch.testing.assert_close(fused(x), model(x), atol=1e-5, rtol=1e-4)
    assert any(n.startswith("fuse: fused 2 Conv-BN") for n in ctx.notes), ctx.notes
    assert any("b3 after c3: OwnForward subclasses a torch.nn layer but computes its own forward" in n
               for n in ctx.notes), ctx.notes


def test_lint_reports_the_pair_fuse_leaves_with_the_same_reason():
    report = lint(Net(), LintConfig(targets=(), time=False), input_specs=[InputSpec((1, 3, 16, 16))])
    conv_bn = [f for f in report.findings if f.rule == "conv-bn"]
    assert [(f.module, f.numbers["reason"]) for f in conv_bn] == [("b3", "custom-forward")], conv_bn
    assert "OwnForward subclasses a torch.nn layer" in conv_bn[0].message and "c3" in conv_bn[0].fix
