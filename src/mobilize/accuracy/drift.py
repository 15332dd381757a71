"""Per-layer int8 drift, engine-free: what one quantized activation costs, as tune's localisers report it.

Each backend's localiser (ONNX Runtime's on the QDQ graph, ExecuTorch's on the PT2E graph) subclasses
:class:`LayerDrift` with the fields only it knows; tune ranks any of them by :attr:`LayerDrift.score_db`.

    >>> d = LayerDrift("relu", "features.0", "conv2d+relu", ("features.1",), 41.0, 30.5, 28.2)
    >>> d.nodes, d.score_db, d.masking
    (('features.0', 'features.1'), 28.2, None)

A localiser that measured the float model's values at each tensor sets ``float_abs_max`` on its rows; a tensor
whose values reach a masking constant (an additive attention mask: ``torch.finfo(float32).min``, ``-1e9``) is
named as the cause (:attr:`LayerDrift.masking`, rule ``masking-constant``): int8 cannot hold it beside ordinary
values.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

MASKING_MAGNITUDE = 1e4
"""A float activation that reaches this far holds a masking constant, not a value int8 can keep beside ordinary
ones (the ONNX Runtime backend keeps such tensors float when it calibrates; tune's drift report names them)."""


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
    def masking(self) -> str | None:
        """Why this tensor ruins int8 when the float model's values at it reach :data:`MASKING_MAGNITUDE` (from the
        localiser's ``float_abs_max``, where it measured it), else None."""
        reach = getattr(self, "float_abs_max", None)
        if reach is None or not reach >= MASKING_MAGNITUDE:
            return None
        return (f"{self.tensor} holds a masking constant (an additive attention mask such as "
                f"torch.finfo(float32).min): the float model's values there reach {reach:.3g}, so one uint8 step is "
                f"{2 * reach / 255:.3g} and every ordinary value in it rounds to 0; keep it in float "
                f"({', '.join(self.nodes) or self.tensor}) (rule masking-constant)")

    @property
    def score_db(self) -> float:
        """Lower is worse: the alone SQNR where measured, else the accumulated drift."""
        return self.alone_sqnr_db if self.alone_sqnr_db is not None else self.drift_sqnr_db

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
            elif key.endswith("_db"):
                out[key] = None if value is None or not math.isfinite(value) else round(value, 2)
            elif isinstance(value, float):
                out[key] = value if math.isfinite(value) else None
        if self.masking:
            out["masking"] = self.masking
        return out


def masking_first(layers: Sequence[LayerDrift]) -> list[LayerDrift]:
    """``layers`` with the masking-constant tensors first (each the cause of its int8 file's drift, whatever its
    rank), the rest in their order."""
    return sorted(layers, key=lambda layer: layer.masking is None)


def cause_lines(layers: Sequence[LayerDrift]) -> list[str]:
    """One line per masking-constant tensor among ``layers``: the drift report's named cause."""
    return [f"cause: {layer.masking}" for layer in layers if layer.masking]
