"""ExecuTorch on MTCNN's ONet layout: PReLU after a Linear (a 2-D input) stops ExecuTorch 1.5's XNNPACK lowering in
ChannelsLastTaggedReshapePass; mobilize keeps such a PReLU out of the delegate, and names the pass when one fails."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mobilize.accuracy.verify import Kind, compare_outputs, judge
from mobilize.core.context import Context
from mobilize.core.errors import ExportError
from mobilize.exporters import EXPORTERS
from mobilize.runtimes.base import open_session
from mobilize.core.inputs import InputSpec


class ConvLinearPReLU(nn.Module):
    """ONet's pattern, small: Conv + PReLU (4-D) + MaxPool(ceil_mode) + Linear + PReLU (2-D)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.prelu1 = nn.Conv2d(3, 4, 3), nn.PReLU(4)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.fc, self.prelu2, self.head = nn.Linear(4 * 3 * 3, 8), nn.PReLU(8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.prelu1(self.conv(x)))
        return self.head(self.prelu2(self.fc(x.flatten(1))))


def test_a_prelu_on_a_2d_input_exports_outside_the_delegate(tmp_path):
    model, spec = ConvLinearPReLU().eval(), InputSpec((1, 3, 8, 8))
    ctx = Context(input_specs=[spec])
    art = EXPORTERS.get("executorch")().export(model, ctx, tmp_path / "onet")
    notes = " ".join(art.notes)
    assert "PReLU on a 2-D input" in notes and "test_executorch_prelu.py" in notes and "#18624" in notes
    assert "PReLU on a 4-D" not in notes, "the conv's PReLU stays in XNNPACK"
    xs = [ctx.example_inputs(seed) for seed in range(3)]
    with open_session(art) as session, torch.inference_mode():
        verdict = judge(compare_outputs([session.run(x) for x in xs], [[model(*x)] for x in xs]), Kind.FLOAT)
    assert verdict.ok, verdict.reason


def test_the_pass_that_fails_is_named_with_its_reason():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    from mobilize.backends.executorch.stages import lower

    program = torch.export.export(nn.Sequential(nn.Linear(8, 4), nn.PReLU(4)).eval(), (torch.randn(1, 8),))
    with pytest.raises(ExportError) as info:
        lower(program, [XnnpackPartitioner()])  # ExecuTorch's stock partitioner, without mobilize's PReLU limit
    text = str(info.value)
    assert "ChannelsLastTaggedReshapePass failed" in text and "not 4-D" in text and "\n" not in text
