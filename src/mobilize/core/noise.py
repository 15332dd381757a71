"""Third-party noise: the lines libraries write to stderr that say nothing a user can act on.

One list, used three ways: a command's stderr passes through :func:`filtered_terminal` (file
descriptor 2, so C++ runtimes' log lines too), a failed stage's log tail is :func:`tail` (noise
dropped, the lines that say why first), and a backend's own quieting reads :func:`patterns`.
Each engine names its own noise in its descriptor (``Backend.noise``); the libraries every engine
shares are named here.

    >>> is_noise("[W1127 01:31:21.015 Quantizer.cpp:111] Warning: torch.quantize_per_tensor ... deprecated")
    True
    >>> tail(["Loading weights: 100%|##########| 3/3", "ValueError: bad shape", "W0000 text_format.cc:1] x"], 2)
    ['ValueError: bad shape']
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
import threading
from typing import Iterable, Iterator

SHARED_NOISE = (
    "Quantizer.cpp:",  # torch: quantized tensor creation is deprecated (every load of an int8 TorchScript file)
    "torch/utils/_pytree.py", "_pytree._register_pytree_node is deprecated",  # transformers on this torch
    "torchao", "Skipping import of cpp extensions",  # torchao's optional kernels ("Failed to load ...so")
    "absl::InitializeLog", "text_format.cc:",  # absl/protobuf, pulled in by the TensorFlow-based frontends
    "cpuinfo_utils.cpp", "Error in cpuinfo:",  # cpuinfo probing a VM's CPU
)
"""Noise from libraries no one engine owns."""

_PROGRESS = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\tINFO \w+\.py:\d+ -- ")
"""A tqdm progress bar (transformers' "Loading checkpoint shards: 100%|###| 2/2"); a Ray INFO record
("2026-11-27 02:00:01,123<TAB>INFO worker.py:1918 -- Started a local Ray instance.")."""

_REASON = re.compile(r"(Error|Exception|error:|failed|Failed|cannot|not supported|unsupported|expected|Traceback)")
"""A line that says why something failed."""


def patterns() -> tuple[str, ...]:
    from mobilize.core.backend import all_backends

    return SHARED_NOISE + tuple(p for b in all_backends() for p in b.noise)


def is_noise(line: str, known: Iterable[str] | None = None) -> bool:
    if line.lstrip().startswith("mobilize"):  # our own lines are never noise
        return False
    known = patterns() if known is None else known
    return bool(_PROGRESS.search(line)) or any(p in line for p in known)


def tail(lines: Iterable[str], n: int = 3) -> list[str]:
    """The last ``n`` lines worth reading: noise dropped, and lines that say why (an error, a failure)
    before the rest, each group in its original order."""
    known = patterns()
    kept = [ln.strip() for ln in lines if ln.strip() and not is_noise(ln, known)]
    reasons = [ln for ln in kept if _REASON.search(ln)]
    others = [ln for ln in kept if not _REASON.search(ln)]
    reasons = reasons[-n:] if n > 0 else []
    room = n - len(reasons)
    return reasons + (others[-room:] if room > 0 else [])


@contextlib.contextmanager
def filtered_terminal(enabled: bool = True) -> Iterator[collections.deque]:
    """Pass this process's stderr (fd 2, inherited by its children) through a filter that drops noise lines.

    Yields the dropped lines (the last 200), for ``--debug`` or a bug report.  Lines reach the terminal as
    they are written (a reader thread forwards each one), so progress and errors keep their order."""
    dropped: collections.deque = collections.deque(maxlen=200)
    try:
        sys.stderr.flush()
        os.fstat(2)
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr is not a file descriptor (captured by a test runner)
        enabled = False
    if not enabled:
        yield dropped
        return
    known = patterns()
    saved = os.dup(2)
    terminal = os.dup(saved)  # the reader's own copy: it outlives ``saved`` if a child keeps the pipe open
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward() -> None:
        with os.fdopen(read_end, "rb", buffering=0) as pipe, os.fdopen(terminal, "wb", buffering=0) as out:
            pending = b""
            while chunk := pipe.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    line = raw.decode("utf-8", "replace")
                    if is_noise(line, known):
                        dropped.append(line)
                    else:
                        out.write(raw + b"\n")
            if pending and not is_noise(pending.decode("utf-8", "replace"), known):
                out.write(pending)

    reader = threading.Thread(target=forward, name="mobilize-stderr", daemon=True)
    reader.start()
    try:
        yield dropped
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes this process's last write end of the pipe: the reader sees its end
        os.close(saved)
        reader.join(timeout=2.0)  # a child still holding the pipe keeps it open: it stays a daemon
