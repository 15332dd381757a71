"""Tiny models of each task on scikit-learn's 8x8 digits (input ``(1,1,8,8)``), seeded so every process builds
the same weights: an embedding net, a detection head in the documented ``(1,N,4+1+C)`` layout, one with
separate boxes/scores/labels outputs and a YOLOv8-style one in ``(1,4+C,N)`` with zero-area boxes, two segmentation
nets (one SegFormer-shaped) and a CTC head."""

from __future__ import annotations

import torch
from torch import nn


class DigitEmbedder(nn.Module):
    """Digits in, a 64-d embedding out: ``(1,64)``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class BoxHead(nn.Module):
    """A 4x4 grid of anchors over the 8x8 image: ``(1,16,4+1+2)`` = x1,y1,x2,y2, a score (probability), two class
    scores."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 7, 2, stride=2))
        ys, xs = torch.meshgrid(torch.arange(4.0), torch.arange(4.0), indexing="ij")
        self.register_buffer("centres", torch.stack([xs.flatten() * 2 + 1, ys.flatten() * 2 + 1], -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.body(x * 4).flatten(2).transpose(1, 2)  # (1,16,7)
        centre = self.centres + p[..., 0:2]
        half = torch.exp(p[..., 2:4].clamp(-2, 2))
        boxes = torch.cat([centre - half, centre + half], -1)
        return torch.cat([boxes, torch.sigmoid(p[..., 4:5] * 4), p[..., 5:7]], -1)


class SplitBoxHead(BoxHead):
    """The same head as separate ``boxes (1,16,4)``, ``scores (1,16)`` and ``labels (1,16)`` outputs."""

    def forward(self, x: torch.Tensor):
        out = super().forward(x)
        return {"boxes": out[..., :4], "scores": out[..., 4], "labels": out[..., 5:].argmax(-1)}


class YoloHead(nn.Module):
    """A YOLOv8-style head: ``(1,4+2,16)`` columns = cx,cy,w,h then two class probabilities per anchor, with no
    objectness; widths and heights pass a ReLU, so some boxes have zero area (as real heads give them)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 6, 2, stride=2))
        ys, xs = torch.meshgrid(torch.arange(4.0), torch.arange(4.0), indexing="ij")
        self.register_buffer("centres", torch.stack([xs.flatten() * 2 + 1, ys.flatten() * 2 + 1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.body(x * 4).flatten(2)  # (1,6,16)
        centre = self.centres + p[:, 0:2]
        size = torch.relu(p[:, 2:4] * 4 + 1.5)  # zero where the head says "no extent": ~40% of the boxes
        return torch.cat([centre, size, torch.sigmoid(p[:, 4:6] * 4)], 1)


class DigitSegmenter(nn.Module):
    """Per-pixel scores for three classes: ``(1,3,8,8)``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x * 4)


class DigitSegFormer(nn.Module):
    """A SegFormer-shaped net (issue #67): an overlapping patch embedding at stride 2, a Mix-FFN block (a 3x3
    depth-wise conv between two 1x1s, GELU, residual) and an all-MLP decode head: per-pixel scores for five
    classes at a fraction of the image, ``(1,5,4,4)`` for the ``(1,1,8,8)`` digit, signed logits, never upsampled
    (SegFormer's own head leaves that to the user, at 1/4)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Conv2d(1, 16, 3, stride=2, padding=1)
        self.norm = nn.BatchNorm2d(16).eval()
        self.ffn = nn.Sequential(nn.Conv2d(16, 32, 1), nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.GELU(),
                                 nn.Conv2d(32, 16, 1))
        self.head = nn.Sequential(nn.Conv2d(16, 16, 1), nn.ReLU(), nn.Conv2d(16, 5, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.embed(x * 4))
        return self.head(h + self.ffn(h))


class ColumnCtc(nn.Module):
    """The image's 8 columns as time steps, 5 symbols (0 = blank): ``(1,8,5)`` log-probabilities."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = x.squeeze(1).transpose(1, 2)  # (1, 8 columns, 8 rows)
        return torch.log_softmax(self.fc(steps * 4), -1)


def digits(count: int = 64):
    """Real samples: the first ``count`` scikit-learn digits as ``(1,1,8,8)`` tensors in [0, 1], and labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    xs = [torch.tensor(img / 16.0, dtype=torch.float32).reshape(1, 1, 8, 8) for img in d.images[:count]]
    return xs, [int(y) for y in d.target[:count]]
