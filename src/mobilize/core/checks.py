"""The limits on numbers every command takes, checked the same way by bench, optimize and compare
(and their Python functions) before any work: a value out of range is a user error naming the flag.
"""

from __future__ import annotations

import os

from mobilize.core.errors import ConfigError

THREADS_PER_CORE = 2
"""More threads than this per core only oversubscribes the CPU (1000 threads made ONNX Runtime take
46 s for 3 iterations); 8 threads are always allowed, for a phone's pool size on a small host."""


def cores() -> int:
    return os.cpu_count() or 1


def max_threads() -> int:
    return max(8, THREADS_PER_CORE * cores())


def check_threads(threads: int | None, flag: str = "--threads") -> None:
    """None means the default (all cores); anything given must be 1..max_threads()."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= max_threads():
        raise ConfigError(f"{flag} must be between 1 and {max_threads()} (this machine has {cores()} cores; more "
                          f"threads only oversubscribe it), got {threads}")


def check_at_least(value: int | float, minimum: int | float, flag: str) -> None:
    if value < minimum:
        raise ConfigError(f"{flag} must be at least {minimum:g}, got {value:g}")


def check_positive(value: float, flag: str, unit: str = "") -> None:
    if not value > 0:
        raise ConfigError(f"{flag} must be more than 0{unit}, got {value:g}")


def default_threads() -> int:
    """One thread per core this process may run on."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
