"""The classic edge demo: depthwise-separable conv + BN + ReLU blocks, max-pool, linear to 1000.

Default: 8 blocks widening from 18 to 1154 channels at 224x224.

    >>> from mobilize.zoo import ZOO
    >>> ZOO.get("toy_classifier").build()(torch.randn(1, 3, 224, 224)).shape
    torch.Size([1, 1000])
"""

from __future__ import annotations

import torch
from torch import nn

from mobilize.core.inputs import InputSpec
from mobilize.zoo import ZOO
from mobilize.zoo.base import ZooModel


def _widths(blocks: int, first: int, last: int) -> list[int]:
    if blocks == 1:
        return [last]
    ratio = (last / first) ** (1 / (blocks - 1))
    return [round(first * ratio**i) for i in range(blocks)]


class GlobalMaxPool(nn.Module):
    """Max over the whole feature map (max_pool2d has int8 kernels; adaptive_max_pool2d does not)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.max_pool2d(x, kernel_size=x.shape[-2:])


class ToyClassifier(nn.Module):
    def __init__(self, blocks: int = 8, first: int = 18, last: int = 1154, num_classes: int = 1000,
                 in_channels: int = 3):
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        layers: list[nn.Module] = []
        cin = in_channels
        for i, cout in enumerate(_widths(blocks, first, last)):
            stride = 2 if i % 2 == 0 and i < 10 else 1
            layers += [
                nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False),
                nn.BatchNorm2d(cin),
                nn.ReLU(inplace=True),
                nn.Conv2d(cin, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            ]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.pool = GlobalMaxPool()
        self.classifier = nn.Linear(cin, num_classes)
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quant(x)
        x = self.pool(self.features(x))
        x = self.classifier(torch.flatten(x, 1))
        return self.dequant(x)


def build(blocks: int = 8, first: int = 18, last: int = 1154, num_classes: int = 1000) -> nn.Module:
    torch.manual_seed(0)
    return ToyClassifier(blocks, first, last, num_classes).eval()


ZOO.register("toy_classifier")(
    ZooModel("toy_classifier", build, (InputSpec((1, 3, 224, 224)),),
             "8 depthwise-separable conv+BN+ReLU blocks (18->1154 channels), max-pool, linear")
)
