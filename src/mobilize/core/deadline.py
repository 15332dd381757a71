"""A time limit on the user's own code run in this process (their metric, their model's constructor), written once.

The alarm raises a ``BaseException`` inside their code, so an ``except Exception`` of theirs cannot swallow it, and
leaves the block as the error ``expired()`` builds.  Only the main thread receives signals: elsewhere (and on a
platform without ``setitimer``) the block runs unlimited.

    >>> with time_limit(None, lambda: TimeoutError("too slow")):  # None or 0: no limit, nothing armed
    ...     print("ran")
    ran

(The alarm itself is tested in a process of its own, tests/lint/test_lint_timeout.py: armed inside a pytest-xdist
worker, it brought the worker down.)
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator


class _Expired(BaseException):
    """Raised by the alarm inside the limited block."""


@contextlib.contextmanager
def time_limit(seconds: float | None, expired: Callable[[], BaseException]) -> Iterator[None]:
    """Run the block for at most ``seconds`` (None or 0: no limit), then raise ``expired()``."""
    import signal
    import threading

    armed = bool(seconds and seconds > 0 and hasattr(signal, "setitimer")
                 and threading.current_thread() is threading.main_thread())
    if not armed:
        yield
        return

    def alarm(_signum, _frame):
        raise _Expired

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Expired:
        raise expired() from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
