"""Progress for long commands: a bar with elapsed time and ETA on a terminal (tqdm, on stderr), plain
lines with the same figures on stdout when stderr is not a terminal (CI logs, pipes).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """Callable as ``progress(done, total, text)``; ``close()`` ends the bar."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None):
        if tty is None:
            tty = _isatty(sys.stderr)
        if stream is None and tty:
            # A private copy of the terminal's stderr: the bar keeps working while fd 2 is captured into a log.
            sys.stderr.flush()
            stream = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
        # Not a terminal (CI logs, pipes): plain lines on stdout, so stderr carries only errors.
        self.stream = stream or sys.stdout
        self.tty = tty
        self.start = time.monotonic()
        self.bar = None
        self.last_done = -1

    def __call__(self, done: int, total: int, text: str) -> None:
        if self.tty:
            self._bar(done, total, text)
            return
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (total - done) if done else None
        tail = f"{_clock(elapsed)} elapsed" + (f", ETA {_clock(eta)}" if eta is not None else "")
        print(f"[{done}/{total}] {text} ({tail})", file=self.stream, flush=True)
        self.last_done = done

    def _bar(self, done: int, total: int, text: str) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total, file=self.stream, dynamic_ncols=True, leave=False,
                            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}")
        self.bar.total = total
        self.bar.n = done
        self.bar.set_description_str(text[:48], refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.stream.flush()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
