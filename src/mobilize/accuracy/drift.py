"""Per-layer int8 drift, engine-free: what one quantized activation costs, as tune's localisers report it.

Each backend's localiser (ONNX Runtime's on the QDQ graph, ExecuTorch's on the PT2E graph) subclasses
:class:`LayerDrift` with the fields only it knows; tune ranks any of them by :attr:`LayerDrift.score_db`.

    >>> d = LayerDrift("relu", "features.0", "conv2d+relu", ("features.1",), 41.0, 30.5, 28.2)
    >>> d.nodes, d.score_db
    (('features.0', 'features.1'), 28.2)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any


@dataclasses.dataclass(frozen=True)
class LayerDrift:
    tensor: str
    """The quantized activation (a graph node's output; the model input too)."""
    producer: str | None
    """What computes it (None for a model input)."""
    op_type: str
    """The producing op (``input`` for a model input)."""
    consumers: tuple[str, ...]
    """What reads it."""
    qdq_sqnr_db: float
    """Its own rounding: SQNR of the tensor through its quantize/dequantize pair."""
    drift_sqnr_db: float
    """Accumulated drift: SQNR of the int8 model's value of the tensor against the float model's."""
    alone_sqnr_db: float | None
    """Final-output SQNR of the float model with only this tensor quantized (None when not measured)."""

    @property
    def nodes(self) -> tuple[str, ...]:
        """What to keep in float so that this tensor stays float: its producer and its readers."""
        head = tuple(n for n in self._heads() if n)
        return head + tuple(n for n in self.consumers if n and n not in head)

    def _heads(self) -> tuple[str | None, ...]:
        return (self.producer,)

    @property
    def score_db(self) -> float:
        """Lower is worse: the alone SQNR where measured, else the accumulated drift."""
        return self.alone_sqnr_db if self.alone_sqnr_db is not None else self.drift_sqnr_db

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
            elif isinstance(value, float) or key.endswith("_db"):
                out[key] = None if value is None or not math.isfinite(value) else round(value, 2)
        return out
