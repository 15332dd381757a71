"""Small models for tune's tests: a digits CNN trained in a few seconds, and a quantization-hostile copy."""

from __future__ import annotations

import torch
from torch import nn

from mobilize.core.inputs import InputSpec

SPEC = InputSpec((1, 3, 8, 8))


class DigitsCNN(nn.Module):
    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, 32, 3, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def digits_tensors(split: str, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    from mobilize.sources.data import open_data

    xs, ys = [], []
    for x, y in open_data(f"digits:{split}").batches(InputSpec((64, 3, 8, 8)), limit=limit):
        xs.append(x)
        ys.append(y)
    return torch.cat(xs), torch.cat(ys)


def trained_digits_cnn(epochs: int = 8) -> DigitsCNN:
    """~95% on digits:test after a few seconds."""
    torch.manual_seed(0)
    model = DigitsCNN()
    x, y = digits_tensors("train")
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(epochs):
        for i in range(0, len(x), 64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64]).backward()
            opt.step()
    return model.eval()


def hostile(model: DigitsCNN, outlier: float = 2000.0) -> DigitsCNN:
    """The same function with a quantization-hostile first layer: conv1 gains a channel that is a constant
    ``outlier`` and conv2 ignores it.  Float outputs are unchanged; a per-tensor int8 range over conv1's
    output now spans [0, outlier], rounding every other channel's values to zero."""
    c = model.conv1.out_channels
    m = DigitsCNN(c + 1)
    with torch.no_grad():
        m.conv1.weight.zero_()
        m.conv1.weight[:c] = model.conv1.weight
        m.conv1.bias[:c] = model.conv1.bias
        m.conv1.bias[c] = outlier
        m.conv2.weight.zero_()
        m.conv2.weight[:, :c] = model.conv2.weight
        m.conv2.bias.copy_(model.conv2.bias)
        m.fc.load_state_dict(model.fc.state_dict())
    return m.eval()
