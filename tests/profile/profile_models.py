"""Small models for the time-profile tests: one op outside XNNPACK that takes most of the time, and its
delegable twin."""

from __future__ import annotations

import torch
from torch import nn

SHAPE = (1, 3, 32, 32)


class PoolNet(nn.Module):
    """conv 3x3 -> relu -> 9x9 avg_pool2d (stride 1, padding 4) -> conv 1x1 -> relu -> global pool -> linear.

    With ``count_include_pad=True`` and padding, XNNPACK refuses the pool ("zero-padding in the averaging
    calculation is not supported"): it runs on ExecuTorch's portable kernel, 81 adds per output value,
    while everything else runs in XNNPACK.  With ``count_include_pad=False`` XNNPACK takes it too."""

    def __init__(self, include_pad: bool = True, channels: int = 16, window: int = 9) -> None:
        super().__init__()
        self.include_pad, self.window = include_pad, window
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 1)
        self.fc = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = nn.functional.avg_pool2d(x, self.window, stride=1, padding=self.window // 2,
                                     count_include_pad=self.include_pad)
        x = torch.relu(self.conv2(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def pool_net(include_pad: bool = True) -> PoolNet:
    torch.manual_seed(0)
    return PoolNet(include_pad).eval()


def sample() -> torch.Tensor:
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(1))


def export_pte(model: nn.Module, path_stem, **options):
    """Through mobilize's ExecuTorch exporter (so the .delegation.json side file is written)."""
    from mobilize.core.context import Context
    from mobilize.exporters import EXPORTERS
    from mobilize.backends.executorch.exporter import ExecuTorchConfig
    from mobilize.sources.data import open_data
    from mobilize.core.inputs import InputSpec

    data = open_data("sample-photos") if options.get("quantize") else None
    ctx = Context(input_specs=[InputSpec(SHAPE)], data=data)
    return EXPORTERS.get("executorch")(ExecuTorchConfig(**options)).export(model, ctx, path_stem)
