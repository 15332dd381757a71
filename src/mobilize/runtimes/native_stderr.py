"""Native runtimes' stderr: C++ log lines written straight to file descriptor 2, filtered.  A line the user's own
code wrote through ``sys.stderr`` meanwhile (a print in their model) is marked while fd 2 is captured and always
passes (:class:`mobilize.core.noise.UserLines`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Iterator, Sequence


@contextlib.contextmanager
def filtered_stderr(noise: Sequence[str]) -> Iterator[None]:
    """Capture fd 2 meanwhile; afterwards print every non-empty line that holds none of ``noise``, and every line
    the user's code wrote."""
    from mobilize.core.noise import USER_MARK, keeps_marks, marking_into

    sys.stderr.flush()
    saved, outer = os.dup(2), sys.stderr
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        sys.stderr = marking_into(tmp.fileno())  # type: ignore[assignment]
        try:
            yield
        finally:
            sys.stderr.flush()
            sys.stderr = outer
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            keep = keeps_marks()  # the terminal's filter reads the mark; a log file must not get it
            for line in tmp.read().decode("utf-8", "replace").splitlines():
                if line.startswith(USER_MARK):
                    print(line if keep else line[len(USER_MARK):], file=sys.stderr)
                elif line.strip() and not any(n in line for n in noise):
                    print(line, file=sys.stderr)
