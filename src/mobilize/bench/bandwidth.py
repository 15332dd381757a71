"""This machine's memory read bandwidth, measured in the run, and the decode bound it sets.

Decoding one token reads every weight once (and one row of the embedding table), so a decoder cannot produce
more tokens per second than the memory system delivers those bytes: bound = bandwidth / bytes read per token
(:func:`bytes_per_token`).  A file at 80% of the bound is near what the hardware allows; at 10%, something else
(kernels, the runtime's per-call cost) limits it.  A file whose bytes read per token fit in the last-level cache
streams nothing from DRAM: it has no DRAM bound, and is labelled cache-resident instead of a percentage.

The figure is a read: numpy reducing a buffer at least 8x the last-level cache (a bitwise or over its 64-bit words,
best of a few repeats, bytes read per second), on the decode's own thread count, each thread its slice - what a
decode does with its weights, and the same figure for every file in the run.  A copy (what this measured before)
reads the figure too low for a bound: its stores cost a read for ownership each, so it moved ~1.5x the bytes it
counted, and a file decoded at 108% of it (ExecuTorch 8da4w at Qwen2.5-0.5B's shape: copy 29.0 GB/s, the read
36 GB/s on the same 2 threads).

    >>> bw = measure_bandwidth(size_mb=32, repeats=2)
    >>> bw.gb_per_s > 0.1, bw.how.startswith("numpy read")
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
    """Bytes read per second, in 1e9 bytes."""
    size_mb: int
    repeats: int
    how: str
    threads: int = 1
    last_level_cache_bytes: int | None = None
    """The largest CPU cache (a file whose bytes read per token fit in it streams no weights from DRAM)."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def last_level_cache_bytes() -> int | None:
    """The largest CPU cache this machine reports (Linux sysfs, cpu0), or None."""
    from pathlib import Path

    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def measure_bandwidth(size_mb: int | None = None, repeats: int = 5, threads: int = 1) -> Bandwidth:
    """The best of ``repeats`` reads of a buffer larger than the last-level cache (``size_mb``: at least 256 MB and
    8x the cache), bytes read per second, on ``threads`` threads (the decode's own count: one thread may not
    saturate the memory system), each reducing its slice with numpy (which lets go of the GIL while it does)."""
    import concurrent.futures

    import numpy as np

    llc = last_level_cache_bytes()
    size_mb = size_mb or max(256, 8 * (llc or 0) // (1 << 20))
    words = np.ones(size_mb * (1 << 20) // 8, dtype=np.uint64)  # written once: its pages are really there
    bounds = np.linspace(0, len(words), max(1, threads) + 1).astype(int)
    slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    with concurrent.futures.ThreadPoolExecutor(len(slices)) as pool:
        def read() -> None:
            list(pool.map(lambda sl: np.bitwise_or.reduce(words[sl]), slices))

        read()  # warm: the threads started, the pages mapped
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            read()
            best = min(best, time.perf_counter() - t0)
    return Bandwidth(words.nbytes / best / 1e9, size_mb, repeats,
                     f"numpy read of {size_mb} MB on {len(slices)} thread(s), best of {repeats} (bytes read per "
                     f"second)", len(slices), llc)


def decode_bound(gb_per_s: float, weight_bytes: float) -> float:
    """Tokens per second when every decoded token reads ``weight_bytes`` at ``gb_per_s``."""
    return gb_per_s * 1e9 / weight_bytes if weight_bytes > 0 else float("inf")


def bytes_per_token(shapes: dict[str, Any], weights: str, group: int | None) -> int:
    """What decoding one token reads of a file's weights, from the model's shapes (``decoder_shapes``) and the file's
    weight type: every linear at its width (fp16: two bytes; int4: half a byte and one 4-byte scale per ``group`` weights, 32 where
    the engine's stock group is not named; int8: one byte and a 4-byte scale per output channel), the embedding
    table one row (a gather), the norms float32.  A table tied to the output head is read once, as the head.

        >>> shapes = {"linear": 1000, "linear_rows": 10, "embedding_row": 8, "other": 16}
        >>> bytes_per_token(shapes, "fp32", None), bytes_per_token(shapes, "int4", 32)
        (4096, 724)
    """
    linear = shapes["linear"]
    width = {"fp32": 4 * linear, "fp16": 2 * linear, "int8": linear + 4 * shapes["linear_rows"],
             "int4": linear // 2 + 4 * -(-linear // (group or 32))}.get(weights, 4 * linear)
    return int(width + 4 * shapes["embedding_row"] + 4 * shapes["other"])
