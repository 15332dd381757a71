"""MobileNetV2 (the torchvision architecture) in its quantizable form.

As ``torchvision.models.quantization.mobilenet_v2``: ReLU activations, QuantStub/DeQuantStub
around the network, ``FloatFunctional`` residual adds and ``fuse_model()``.  ``width_mult``
scales the channels.  Weights are random (seeded; no pretrained weights can be downloaded) with
BatchNorm statistics set from scikit-learn's sample photos, so activations have realistic ranges.

    >>> from mobilize.zoo import ZOO
    >>> m = ZOO.get("mobilenet_v2").build()
    >>> m(torch.randn(1, 3, 224, 224)).shape
    torch.Size([1, 1000])
"""

from __future__ import annotations

import torch
from torch import nn
from torch.ao.nn.quantized import FloatFunctional

from mobilize.core.inputs import InputSpec
from mobilize.zoo import ZOO
from mobilize.zoo.base import ZooModel


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNReLU(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1, relu: bool = True):
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
        ]
        if relu:
            layers.append(nn.ReLU(inplace=False))
        super().__init__(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU(cin, hidden, kernel=1))
        layers += [
            ConvBNReLU(hidden, hidden, stride=stride, groups=hidden),
            ConvBNReLU(hidden, cout, kernel=1, relu=False),
        ]
        self.conv = nn.Sequential(*layers)
        self.skip_add = FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_res_connect:
            return self.skip_add.add(x, self.conv(x))
        return self.conv(x)


class MobileNetV2(nn.Module):
    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2):
        super().__init__()
        cin = _make_divisible(32 * width_mult)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU(3, cin, stride=2)]
        for t, c, n, s in self.SETTINGS:
            cout = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNReLU(cin, self.last_channel, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.last_channel, num_classes))
        self.quant = torch.ao.quantization.QuantStub()
        self.dequant = torch.ao.quantization.DeQuantStub()
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quant(x)
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1)
        x = self.classifier(torch.flatten(x, 1))
        return self.dequant(x)

    def fuse_model(self) -> None:
        """Fuse every Conv-BN(-ReLU) in place, as torchvision's quantizable model does."""
        from torch.ao.quantization import fuse_modules

        for m in self.modules():
            if isinstance(m, ConvBNReLU):
                fuse_modules(m, ["0", "1", "2"] if len(m) == 3 else ["0", "1"], inplace=True)


def settle_batchnorm(model: nn.Module, size: int = 224, samples: int = 4) -> nn.Module:
    """Set BatchNorm running statistics from real photos (scikit-learn's samples).

    With random weights and BN at its initial identity statistics, activations shrink layer by
    layer until the logits are ~1e-9, and every absolute tolerance passes without proving
    anything.  Real statistics give realistic activation ranges for accuracy checks and int8."""
    from mobilize.sources.data import open_data
    from mobilize.core.inputs import InputSpec

    x = torch.cat(open_data(f"sample-photos:{samples}").samples(InputSpec((1, 3, size, size)), samples))
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the batch
    model.train()
    with torch.no_grad():
        model(x)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = 0.1
    return model.eval()


def build(width_mult: float = 1.0, num_classes: int = 1000) -> nn.Module:
    torch.manual_seed(0)
    return settle_batchnorm(MobileNetV2(num_classes=num_classes, width_mult=width_mult))


ZOO.register("mobilenet_v2")(
    ZooModel("mobilenet_v2", build, (InputSpec((1, 3, 224, 224)),),
             "MobileNetV2 (torchvision architecture, quantizable), random seeded weights")
)
