"""Native runtimes' stderr: C++ log lines written straight to file descriptor 2, filtered.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Iterator, Sequence


@contextlib.contextmanager
def filtered_stderr(noise: Sequence[str]) -> Iterator[None]:
    """Capture fd 2 meanwhile; afterwards print every non-empty line that holds none of ``noise``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode("utf-8", "replace").splitlines():
                if line.strip() and not any(n in line for n in noise):
                    print(line, file=sys.stderr)
