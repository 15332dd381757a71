"""Error statistics of a variant's outputs against the float reference, and top-1 against labels.

    >>> ref = torch.tensor([[1.0, 2.0, 3.0]]); out = ref + 0.01
    >>> s = ErrorStats.compare([out], [ref])
    >>> round(s.max_abs, 3), s.top1_agreement, s.sqnr_db > 40
    (0.01, 1.0, True)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence


@dataclasses.dataclass
class ErrorStats:
    max_abs: float
    mean_abs: float
    cosine: float
    sqnr_db: float
    """Signal-to-quantization-noise ratio: 10·log10(Σref² / Σ(out−ref)²); inf when identical."""
    top1_agreement: float
    """Fraction of samples whose arg-max matches the reference's."""
    samples: int

    @classmethod
    def compare(cls, outputs: Sequence[Any], references: Sequence[Any]) -> "ErrorStats":
        import torch

        out = torch.cat([_float(o).reshape(len(_float(o)), -1) for o in outputs]).double()
        ref = torch.cat([_float(r).reshape(len(_float(r)), -1) for r in references]).double()
        diff = out - ref
        noise = float((diff**2).sum())
        signal = float((ref**2).sum())
        cosine = float(torch.nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0))
        return cls(
            max_abs=float(diff.abs().max()),
            mean_abs=float(diff.abs().mean()),
            cosine=cosine,
            sqnr_db=math.inf if noise == 0 else 10 * math.log10(max(signal, 1e-30) / noise),
            top1_agreement=float((out.argmax(1) == ref.argmax(1)).double().mean()),
            samples=len(out),
        )

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for key, value in d.items():
            if isinstance(value, float) and not math.isfinite(value):
                d[key] = None  # JSON has no inf/nan: sqnr_db None = identical outputs, else non-finite outputs
        d["finite"] = math.isfinite(self.max_abs)
        return d


def _float(t: Any):
    import torch

    t = t if isinstance(t, torch.Tensor) else torch.as_tensor(t)
    return t.dequantize().float() if t.is_quantized else t.float()


def top1(outputs: Sequence[Any], labels: Sequence[Any]) -> float:
    """Top-1 accuracy in percent."""
    import torch

    preds = torch.cat([_float(o).reshape(len(_float(o)), -1).argmax(1) for o in outputs])
    y = torch.cat([torch.as_tensor(l).reshape(-1) for l in labels])
    return 100.0 * float((preds == y).double().mean())
