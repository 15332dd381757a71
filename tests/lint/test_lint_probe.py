"""Issue #48 item 1: lint's activation probe runs each parameter-free module of the user's model; a pool or a
softmax over channels rejects a 2-D probe with IndexError, which killed ``mobilize lint`` (exit 1, internal
error) and dropped the lint section from compare's report."""

from __future__ import annotations

import json

from torch import nn

from mobilize.lint.activations import computed_kind

MODEL = '''
import torch
from torch import nn


class Pooled(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.AvgPool2d(2)
        self.channels = nn.Softmax(dim=-3)
        self.act = nn.SiLU()
        self.fc = nn.Linear(8 * 16 * 16, 4)

    def forward(self, x):
        return self.fc(torch.flatten(self.act(self.channels(self.pool(torch.relu(self.conv(x))))), 1))
'''


def test_pools_and_channel_softmax_are_no_activation():
    for module in (nn.AvgPool2d(2), nn.Softmax(dim=-3), nn.MaxPool2d(2), nn.Upsample(scale_factor=2),
                   nn.PixelShuffle(2)):
        assert computed_kind(module) is None, module
    assert computed_kind(nn.SiLU()) == "silu" and computed_kind(nn.Tanh()) == "tanh"


def test_model_with_avgpool_lints_through_the_cli(tmp_path, run_cli_process):
    (tmp_path / "pooled.py").write_text(MODEL)
    out = tmp_path / "lint.json"
    code, stdout, stderr = run_cli_process("lint", f"{tmp_path / 'pooled.py'}:Pooled", "--input_dims", "1,3,32,32",
                                           "--target", "none", "--json", out)
    assert code == 0, stderr
    assert "internal error" not in stderr and "pool" in stdout
    data = json.loads(out.read_text())
    assert data["counts"]["by_rule"].get("activation") == 1  # the SiLU after them is still found
