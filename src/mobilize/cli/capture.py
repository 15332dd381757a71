"""Keep third-party noise off the user's terminal: the process's stderr (file descriptor 2, so C++
runtimes' log lines too) goes to a log file while a command works; ``-v`` lets it through.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator


class CapturedLog:
    def __init__(self, path: Path | None):
        self.path = path

    def tail(self, lines: int = 3) -> list[str]:
        if self.path is None or not self.path.is_file():
            return []
        from mobilize.core import noise
        return noise.tail(self.path.read_text(errors="replace").splitlines(), lines)


@contextlib.contextmanager
def capture_stderr(path: Path | None) -> Iterator[CapturedLog]:
    """Redirect fd 2 (and ``sys.stderr``) into ``path`` for the duration; None leaves stderr alone."""
    log = CapturedLog(path)
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr is not a file descriptor (captured by a test runner)
        path = None
    if path is None:
        log.path = None
        yield log
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    saved_obj = sys.stderr
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(fd, 2)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        yield log
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
        sys.stderr = saved_obj
