"""The PyTorch mobile-recipe example: Conv2d(3,5,3,bias=False) + BN + ReLU between quant stubs.

It converts its input to channels-last in ``forward``, as the recipe's example does.

    >>> from mobilize.zoo import ZOO
    >>> m = ZOO.get("conv_bn_relu").build()
    >>> m(torch.randn(1, 3, 224, 224)).shape
    torch.Size([1, 5, 222, 222])
"""

from __future__ import annotations

import torch
from torch import nn

from mobilize.core.inputs import InputSpec
from mobilize.zoo import ZOO
from mobilize.zoo.base import ZooModel


class ConvBnReLU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.conv = nn.Conv2d(3, 5, 3, bias=False)
        self.bn = nn.BatchNorm2d(5)
        self.relu = nn.ReLU(inplace=True)
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous(memory_format=torch.channels_last)
        x = self.quant(x)
        x = self.relu(self.bn(self.conv(x)))
        return self.dequant(x)


def build() -> nn.Module:
    torch.manual_seed(0)
    model = ConvBnReLU()
    # Non-trivial BN statistics, so folding BN is really exercised.
    model.bn.running_mean.uniform_(-0.5, 0.5)
    model.bn.running_var.uniform_(0.5, 2.0)
    model.bn.weight.data.uniform_(0.5, 1.5)
    model.bn.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


ZOO.register("conv_bn_relu")(
    ZooModel("conv_bn_relu", build, (InputSpec((1, 3, 224, 224)),), "Conv2d(3,5,3)+BN+ReLU, channels-last input", 5)
)
