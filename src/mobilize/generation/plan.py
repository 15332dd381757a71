"""The ``generation`` plan: every engine's decoder variants (``Backend.decoders``), in a stable order, the
float eager file first (the speed-up reference).

    >>> names = [v.name for v in generation_variants()]
    >>> names[0], "executorch-8da4w" in names, "onnx-int4" in names
    ('eager-fp32', True, True)
"""

from __future__ import annotations

from typing import Sequence

from mobilize.core.backend import entries
from mobilize.core.decoder import DecoderVariant
from mobilize.core.errors import ConfigError
from mobilize.core.registry import did_you_mean

REFERENCE = "eager-fp32"
"""The variant speed-ups are measured against."""


def generation_variants(names: Sequence[str] = ()) -> list[DecoderVariant]:
    """The variants named (all when empty), each loaded from its engine's folder."""
    found = entries("decoders")
    order = sorted(found, key=lambda n: (n != REFERENCE, found[n][0].name, n))
    for name in names:
        if name not in found:
            raise ConfigError(f"unknown decoder variant '{name}'", hint=did_you_mean(name, order))
    chosen = [n for n in order if not names or n in names]
    return [found[n][0].load(found[n][1]) for n in chosen]
