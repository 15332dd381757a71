"""Small models with the input signatures users bring (nobody here wrote them for mobilize): two int64
inputs with an embedding and a dict output, a scalar tensor plus a Python ``int`` argument."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

TOKENS = 12


class TwoInputEncoder(nn.Module):
    """A sentence-encoder shape: token ids and attention mask (int64) in, ``{"embedding": ...}`` out."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(100, 16)
        self.proj = nn.Linear(16, 16)
        self.out = nn.Linear(16, 8)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.relu(self.proj(self.emb(input_ids)))
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        return {"embedding": self.out(pooled)}


class ScalarVad(nn.Module):
    """Audio frames, a 0-d gain tensor, and a Python ``int`` sample rate that changes the arithmetic."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor, gain: torch.Tensor, sr: int = 8000) -> torch.Tensor:
        scale = 1.0 if sr == 16000 else 0.5
        return torch.sigmoid(self.fc(x * gain) * scale)


def write_encoder_npz(path, count: int = 16) -> None:
    """Real-looking token ids (50..99, unlike seeded random inputs' 0..9) and masks, stored in the order
    opposite to the forward's so that only matching by name feeds them right."""
    rng = np.random.default_rng(1)
    ids = rng.integers(50, 100, size=(count, TOKENS)).astype(np.int64)
    mask = np.ones((count, TOKENS), dtype=np.int64)
    mask[:, 9:] = 0
    np.savez(path, attention_mask=mask, input_ids=ids)
