"""This machine's memory bandwidth, measured in the run (a STREAM-like copy), and the decode bound it sets.

Decoding one token reads every weight once, so a decoder cannot produce more tokens per second than the
memory system delivers its weights: bound = bandwidth / weight bytes per token.  A file at 80% of the bound is
near what the hardware allows; at 10%, something else (kernels, the runtime's per-call cost) limits it.

The copy is numpy's (``np.copyto`` of a buffer many times the last-level cache, best of a few repeats, bytes
read + written), on one thread: a lower bound on what a multi-threaded runtime can stream, and the same
figure for every file in the run.

    >>> bw = measure_bandwidth(size_mb=32, repeats=2)
    >>> bw.gb_per_s > 0.1, bw.how.startswith("numpy copy")
    (True, True)
    >>> round(decode_bound(bw.gb_per_s, 1e9), 2) == round(bw.gb_per_s, 2)
    True
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any


@dataclasses.dataclass(frozen=True)
class Bandwidth:
    gb_per_s: float
    """Bytes read plus bytes written per second, in 1e9 bytes."""
    size_mb: int
    repeats: int
    how: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def measure_bandwidth(size_mb: int = 256, repeats: int = 5) -> Bandwidth:
    """The best of ``repeats`` copies of a ``size_mb`` buffer (reads + writes counted)."""
    import numpy as np

    src = np.ones(size_mb * (1 << 20) // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch both: page faults are not bandwidth
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    moved = 2 * src.nbytes
    return Bandwidth(moved / best / 1e9, size_mb, repeats,
                     f"numpy copy of {size_mb} MB, best of {repeats} (bytes read + written per second)")


def decode_bound(gb_per_s: float, weight_bytes: float) -> float:
    """Tokens per second when every decoded token reads ``weight_bytes`` at ``gb_per_s``."""
    return gb_per_s * 1e9 / weight_bytes if weight_bytes > 0 else float("inf")
