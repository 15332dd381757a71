"""This machine's memory read bandwidth, measured in the run, and the decode bound it sets.

Decoding one token reads every weight once (and one row of the embedding table), so a decoder cannot produce
more tokens per second than the memory system delivers those bytes: bound = bandwidth / bytes read per token
(:func:`bytes_per_token`).  A file at 80% of the bound is near what the hardware allows; at 10%, something else
(kernels, the runtime's per-call cost) limits it.  A file whose bytes read per token are served from a cache
streams nothing from DRAM: it has no DRAM bound, and is labelled cache-resident instead of a percentage.

Which files those are is measured, never read off the cache size the machine reports (a VM's is the hypervisor's: one
of ours says 480 MiB of L3, which would have called a 309 MB int4 file "cache" while it decoded at DRAM speed): the
same read over a buffer of the file's working set (its bytes per token, :meth:`RoundSampler.at_size`) against the
DRAM figure; at least :data:`CACHE_RATIO` times faster is a cache (:func:`residency`).  The DRAM figure, not a read at
8x the working set: 8x a 3 MB working set still fits a 32 MB L3.

The DRAM figure is a read: numpy reducing a buffer of :data:`DRAM_READ_MB` (a bitwise or over its 64-bit words,
best of a few repeats, bytes read per second), on the decode's own thread count, each thread its slice - what a
decode does with its weights, and the same figure for every file in the run: compare reads it after each timed
round and takes the median (:class:`RoundSampler`), so the bound is the rounds' machine's.  A copy (what this measured before)
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


DRAM_READ_MB = 1024
"""The DRAM reading's buffer: larger than any last-level cache of the machines this runs on, whatever they report."""
CACHE_RATIO = 1.5
"""A working set read at least this many times faster than DRAM is served from a cache (a read from DRAM varies by
10-20% between readings here; L3 reads run 2-5x DRAM)."""


def residency(working_set_bytes: int | None, at_size_gb_per_s: float | None, dram_gb_per_s: float | None,
              beside: str = "") -> tuple[bool | None, str]:
    """(whether a file whose decode reads ``working_set_bytes`` a token is cache-resident, the rule and figures that
    decided it), from the read over a buffer of that size and the DRAM figure (``beside``: how that figure was read,
    said); (None, why) when not measured.

        >>> residency(3_000_000, 80.0, 20.0)[0], residency(309_000_000, 21.5, 20.0)[0]
        (True, False)
        >>> residency(309_000_000, 21.5, 20.0)[1]
        'measured: its 309 MB working set read at 21.5 GB/s, DRAM 20.0 GB/s: not cache-resident (rule: >= 1.5x DRAM)'
    """
    if not working_set_bytes or not dram_gb_per_s:
        return None, "not measured (no bandwidth read in this run)"
    if at_size_gb_per_s is None:
        return False, (f"its {working_set_bytes / 1e6:.0f} MB working set is no smaller than the DRAM reading's "
                       f"{DRAM_READ_MB} MB buffer: read from DRAM")
    resident = at_size_gb_per_s >= CACHE_RATIO * dram_gb_per_s
    return resident, (f"measured: its {working_set_bytes / 1e6:.0f} MB working set read at {at_size_gb_per_s:.1f} GB/s, "
                      f"DRAM {dram_gb_per_s:.1f} GB/s{beside}: {'' if resident else 'not '}cache-resident "
                      f"(rule: >= {CACHE_RATIO:g}x DRAM)")


@dataclasses.dataclass(frozen=True)
class Bandwidth:
    gb_per_s: float
    """Bytes read per second, in 1e9 bytes."""
    size_mb: int
    repeats: int
    how: str
    threads: int = 1
    last_level_cache_bytes: int | None = None
    """The largest CPU cache the machine reports (for the record only: residency is measured, ``at_size_gb_per_s``)."""
    samples: tuple[float, ...] = ()
    """Each reading (GB/s) when the figure is their median (:class:`RoundSampler`: one after each timed round)."""
    before_rounds_gb_per_s: float | None = None
    """The one reading before the builds (the reference stage's), beside the rounds' median."""
    at_size_gb_per_s: dict[str, float | None] = dataclasses.field(default_factory=dict)
    """Working set in bytes (as a string, a JSON key) -> the same read over a buffer of that size, GB/s (None: not
    smaller than the DRAM buffer): what decides each file's cache residency (:func:`residency`)."""
    at_size_dram_gb_per_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """Working set -> the whole DRAM buffer read right after that read: the figure it is weighed against (a VM's
    memory moved 31.7-60.3 GB/s between rounds here; a 346 MB read in a fast moment was 1.6x the rounds' median and
    would have been called cache-resident)."""

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
    """The best of ``repeats`` reads of a buffer larger than any last-level cache (``size_mb``: :data:`DRAM_READ_MB`),
    bytes read per second, on ``threads`` threads (the decode's own count: one thread may not
    saturate the memory system), each reducing its slice with numpy (which lets go of the GIL while it does)."""
    reader = RoundSampler(threads, size_mb, repeats)
    try:
        gb_per_s = reader.sample()
    finally:
        reader.close()
    return Bandwidth(gb_per_s, reader.size_mb, repeats, f"numpy read of {reader.size_mb} MB on {len(reader.slices)} "
                     f"thread(s), best of {repeats} (bytes read per second)", len(reader.slices), reader.llc)


class RoundSampler:
    """The bandwidth read beside the timed rounds: one reading (best of ``repeats``) after each round, the figure
    their median.  One reading taken minutes before the rounds swung 35-61 GB/s between runs on one 2-vCPU VM (a
    neighbour's load comes and goes), so a file's share of a bound read at another time says little; read between
    the rounds, the bound shares the rounds' machine.  Holds the buffer (``size_mb``, as ``measure_bandwidth``)
    until :meth:`close`.

        >>> sampler = RoundSampler(threads=1, size_mb=32)
        >>> _ = sampler.sample(), sampler.sample()
        >>> bw = sampler.result(before=None)
        >>> sampler.close()
        >>> len(bw.samples), bw.gb_per_s == sum(bw.samples) / 2, bw.how.endswith("range")
        (2, True, False)
    """

    def __init__(self, threads: int = 1, size_mb: int | None = None, repeats: int = 3):
        import concurrent.futures

        import numpy as np

        self.llc = last_level_cache_bytes()
        self.size_mb = size_mb or DRAM_READ_MB
        self.repeats, self.readings = repeats, []
        self.at_size: dict[str, float | None] = {}
        self.at_size_dram: dict[str, float] = {}
        self.words: Any = np.ones(self.size_mb * (1 << 20) // 8, dtype=np.uint64)
        bounds = np.linspace(0, len(self.words), max(1, threads) + 1).astype(int)
        self.slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        self.pool = concurrent.futures.ThreadPoolExecutor(len(self.slices))
        self._read()  # warm: the threads started, the pages mapped

    def _read(self, slices: list | None = None, loops: int = 1) -> None:
        import numpy as np

        def reduce(sl: slice) -> None:
            for _ in range(loops):
                np.bitwise_or.reduce(self.words[sl])

        list(self.pool.map(reduce, slices or self.slices))

    def _best_s(self, slices: list | None = None, loops: int = 1) -> float:
        """The fastest of ``repeats`` timed reads, each ``loops`` passes per thread, seconds per pass."""
        best = float("inf")
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            self._read(slices, loops)
            best = min(best, time.perf_counter() - t0)
        return best / loops

    def sample(self) -> float:
        self.readings.append(self.words.nbytes / self._best_s() / 1e9)
        return self.readings[-1]

    def at_size_of(self, nbytes: int) -> float | None:
        """The same read over the first ``nbytes`` of the buffer (a file's working set), each thread its slice, each
        timed read as many passes over it as one read of the whole buffer makes bytes (a small buffer is read in
        microseconds: the thread pool's own start would otherwise be most of the time); None when it is not smaller
        than the buffer.  Kept in :attr:`at_size` for :meth:`result`.

            >>> sampler = RoundSampler(threads=1, size_mb=32)
            >>> small, whole = sampler.at_size_of(1 << 20), sampler.at_size_of(64 << 20)
            >>> sampler.close()
            >>> small > 0, whole
            (True, None)
        """
        import numpy as np

        words = nbytes // 8
        if words >= len(self.words) or words < len(self.slices):
            self.at_size[str(nbytes)] = None
            return None
        bounds = np.linspace(0, words, len(self.slices) + 1).astype(int)
        slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        self._read(slices)  # warm: its pages in whatever cache holds them, as a decode's weights are
        gb = words * 8 / self._best_s(slices, loops=max(1, len(self.words) // words)) / 1e9
        self.at_size[str(nbytes)] = gb
        self.at_size_dram[str(nbytes)] = self.words.nbytes / self._best_s() / 1e9  # the same moment's DRAM
        return gb

    def result(self, before: float | None) -> Bandwidth:
        import statistics

        got = self.readings
        how = (f"numpy read of {self.size_mb} MB on {len(self.slices)} thread(s), best of {self.repeats}, after each "
               f"of {len(got)} timed round(s): median {statistics.median(got):.1f}, range {min(got):.1f}-"
               f"{max(got):.1f} GB/s" + (f"; {before:.1f} GB/s read once before the builds" if before else ""))
        return Bandwidth(statistics.median(got), self.size_mb, self.repeats, how, len(self.slices), self.llc,
                         tuple(got), before, dict(self.at_size), dict(self.at_size_dram))

    def close(self) -> None:
        self.pool.shutdown()
        self.words = None


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
