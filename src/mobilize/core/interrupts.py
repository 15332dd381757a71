"""The CLI's one handler of SIGINT and SIGTERM, and when an interrupt may act.

An interrupt is a KeyboardInterrupt in the main thread, at once, except where raising one would break something:

- inside :func:`interrupts_deferred` (a child being started and registered): raised as soon as that section ends;
- inside an import: a KeyboardInterrupt raised in the middle of one is lost (a library's clean-up swallows it; torch's
  does), turns into "ImportError: cannot load module more than once", or makes Python end by SIGINT after the run
  said "interrupted".  Before the command has made anything to clean up (:func:`work_begins`: a temporary folder,
  a child process), the process ends at once, with the clean-ups registered by :func:`on_abandon` run (torch takes
  2-5 s to import, too long to wait for); after it, the interrupt waits for the import to end;
- after :func:`exiting` (the interpreter's own exit): the process ends at once, quietly.

This module imports only the standard library's built-ins, so the CLI installs the handler (:func:`install`) before
it imports anything else.

    >>> with interrupts_deferred():
    ...     pass
"""

from __future__ import annotations

import _signal as signal  # not signal's enum wrappers: importing enum would widen the window before install()
import _thread
import os
import sys
import time

TYPE_CHECKING = False  # not typing's: importing typing would widen the window before the handler is installed
if TYPE_CHECKING:
    from typing import Any, Callable

_deferring = 0
_pending: int | None = None
_exiting = False
_work = False
_watching = False
_abandon: list[Callable[[], None]] = []
_main_ident = _thread.get_ident()
INTERRUPTED = "mobilize: interrupted"
"""What the CLI prints when an interrupt ended a run."""


def install() -> None:
    """Make SIGTERM (what `timeout` and CI cancellation send) and SIGINT (unless the shell made it ignored) call
    :func:`on_interrupt`; from the main thread only (elsewhere: nothing)."""
    global _main_ident, _work, _exiting
    if _thread.get_ident() != _main_thread_ident():
        return
    _main_ident, _work, _exiting = _thread.get_ident(), False, False
    signal.signal(signal.SIGTERM, on_interrupt)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell made it ignored
        signal.signal(signal.SIGINT, on_interrupt)
    # .venv/bin/mobilize (scripts/mobilize-launcher.c) starts Python with both blocked, so that one sent during the
    # interpreter's start-up waits for this handler: delivered here, if one is pending
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _main_thread_ident() -> int:
    threading = sys.modules.get("threading")  # imported by then wherever another thread exists
    return threading.main_thread().ident if threading is not None else _thread.get_ident()


def work_begins() -> None:
    """This process has made something an interrupt must clean up by unwinding (a temporary folder, a child): from now
    on an interrupt inside an import waits for the import to end instead of ending the process."""
    global _work
    _work = True


def exiting() -> None:
    """The command has ended and the interpreter exits now (it joins threads and runs atexit clean-ups): an interrupt
    from here on ends the process at once, quietly, instead of raising a KeyboardInterrupt into that clean-up (which
    Python prints as a traceback after "mobilize: interrupted")."""
    global _exiting
    _exiting = True


class on_abandon:
    """``with on_abandon(callback):`` - run ``callback`` if an interrupt ends the process inside this block without
    unwinding it (see the module docstring): what the block's own ``finally`` would have undone."""

    def __init__(self, callback: Callable[[], None]):
        self.callback = callback

    def __enter__(self) -> None:
        _abandon.append(self.callback)

    def __exit__(self, *exc: Any) -> None:
        if self.callback in _abandon:
            _abandon.remove(self.callback)


def on_interrupt(signum: int, frame: Any) -> None:
    """The CLI's handler of SIGINT and SIGTERM (see the module docstring)."""
    global _pending
    if _exiting:
        os._exit(130)
    if _deferring:
        _pending = signum
        return
    if _importing(frame):
        if not _work:
            _abandon_now()
        _after_import(signum)
        return
    raise KeyboardInterrupt


class interrupts_deferred:
    """A section of the main thread that an interrupt must not cut in two (in other threads: no effect, Python runs
    signal handlers on the main thread only).  Needs :func:`on_interrupt` installed."""

    def __enter__(self) -> None:
        global _deferring
        self.here = _thread.get_ident() == _main_ident
        if self.here:
            _deferring += 1

    def __exit__(self, *exc: Any) -> None:
        global _deferring, _pending
        if not self.here:
            return
        _deferring -= 1
        if not _deferring and _pending is not None:
            _pending = None
            raise KeyboardInterrupt


def _importing(frame: Any) -> bool:
    """Whether ``frame`` (the main thread's, where the signal landed) runs inside an import."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _abandon_now() -> None:
    """End the process now: the registered clean-ups (the terminal filter handing fd 2 back, the output folders the run
    made), the one line, exit 130."""
    while _abandon:
        _abandon.pop()()
    os.write(2, f"{INTERRUPTED}\n".encode())
    os._exit(130)


def _after_import(signum: int) -> None:
    """Deliver ``signum`` to the main thread again once it has left the import it is in (a thread watches its stack)."""
    global _watching
    if _watching:
        return
    _watching = True

    def watch() -> None:
        global _watching
        while _importing(frame := sys._current_frames().get(_main_ident)):
            time.sleep(0.01)
        _watching = False
        if frame is not None:  # the main thread still runs
            signal.pthread_kill(_main_ident, signum)

    _thread.start_new_thread(watch, ())
