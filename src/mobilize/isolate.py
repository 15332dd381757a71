"""Run work that may crash in native code (ExecuTorch, ONNX Runtime, a user's model) in a spawned
child process, so an abort or a segfault becomes a one-line error naming the stage it happened in
instead of killing the command without a word.

The child reports its progress as it goes (the last step it announced is the stage a crash is
blamed on) and sends back its return value or its error; errors keep their type, so a user error
in the child is still exit 2 and a bug in mobilize still exit 1.  The child ignores Ctrl-C; an
interrupt (Ctrl-C or SIGTERM) in the parent kills it at once, or, with ``graceful_interrupt=True``,
becomes a KeyboardInterrupt in the child (which may keep what it found so far and return it; a
second interrupt kills it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from mobilize.errors import InternalError, MobilizeError, UserError


@dataclasses.dataclass
class Step:
    done: int
    total: int
    text: str


@dataclasses.dataclass
class Returned:
    value: Any


@dataclasses.dataclass
class Raised:
    error_type: str
    """The mobilize.errors class of the error (UserError for anything the child cannot name)."""
    message: str
    internal: bool
    trace: str


def run_isolated(func: Callable[..., Any], *args: Any, what: str,
                 progress: Callable[[int, int, str], None] | None = None, log_path: str | os.PathLike | None = None,
                 timeout_s: float | None = None, crash_hint: str | None = None, graceful_interrupt: bool = False,
                 **kwargs: Any) -> Any:
    """``func(*args, progress=..., **kwargs)`` in a spawned process; its return value, or its error raised here.

    ``func`` must be importable (a module-level function) and its arguments picklable.  A child that
    dies without answering (a signal, ``os._exit``) raises a UserError naming the stage, the log file
    (``log_path``, where the child's stderr goes) and ``crash_hint``; one silent for ``timeout_s`` is killed."""
    ctx = multiprocessing.get_context("spawn")
    conn, child_end = ctx.Pipe()
    process = ctx.Process(target=_child_main, args=(child_end, func, args, kwargs, os.getpid(), graceful_interrupt),
                          daemon=True)
    stage = "start"
    interrupted = False
    try:
        start_ignoring_sigint(process)
        child_end.close()
        while True:
            try:
                if not conn.poll(timeout_s):
                    _kill(process)
                    raise UserError(f"the {what} process gave no answer within {timeout_s:g} s", stage=stage)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    process.join(10)
                    if interrupted:  # it died of the interrupt passed on to it
                        raise KeyboardInterrupt from None
                    raise UserError(f"the {what} process {_death(process.exitcode)}{_tail(log_path)}", stage=stage,
                                    hint=crash_hint) from None
                if isinstance(msg, Step):
                    stage = msg.text
                    if progress:
                        progress(msg.done, msg.total, msg.text)
                elif isinstance(msg, Returned):
                    process.join(5)  # let it exit by itself; it has nothing left to write
                    return msg.value
                elif isinstance(msg, Raised):
                    if msg.error_type == "KeyboardInterrupt":
                        raise KeyboardInterrupt
                    raise _rebuild(msg)
            except KeyboardInterrupt:
                if not graceful_interrupt or interrupted or not process.is_alive():
                    raise
                interrupted = True  # the child stops and answers with what it has; a second interrupt kills it
                os.kill(process.pid, signal.SIGTERM)
    finally:  # an error, Ctrl-C or SIGTERM here: the child goes at once
        _kill(process)
        conn.close()


def start_ignoring_sigint(process, on_start: Callable[[], None] | None = None) -> None:
    """Start a child that never sees Ctrl-C: the parent decides what an interrupt stops, and no child
    prints a KeyboardInterrupt traceback from the middle of its start-up.

    SIGINT is blocked on this thread while the child starts: the mask survives fork and exec and Python
    never unblocks it, so the child keeps it blocked for life.  An interrupt (Ctrl-C or SIGTERM) that
    arrives meanwhile waits (:func:`interrupts_deferred`) until the child is started and ``on_start`` (the
    caller's registration of it) has run, so whoever handles the interrupt knows the child to stop: raised
    half-way through ``start``, it left a running child nobody knew of (which then wrote into a temp folder
    already removed), or one that died reading what it was never sent.  A process-directed signal goes to
    any thread that does not block it, so the mask alone never kept it out of ``start``."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with interrupts_deferred():
            process.start()
            if on_start is not None:
                on_start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


_deferring = 0
_pending: int | None = None


def on_interrupt(signum: int, frame: Any) -> None:
    """The CLI's handler of SIGINT and SIGTERM: a KeyboardInterrupt, at once or, inside
    :func:`interrupts_deferred`, as soon as that section ends."""
    global _pending
    if _deferring:
        _pending = signum
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """A section of the main thread that an interrupt must not cut in two (in other threads: no effect,
    Python runs signal handlers on the main thread only).  Needs :func:`on_interrupt` installed."""
    global _deferring, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending is not None:
            _pending = None
            raise KeyboardInterrupt


def _kill(process) -> None:
    if process.pid is None:  # never started
        return
    if process.is_alive():
        process.kill()
    process.join(10)


def _death(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        why = {"SIGABRT": "an abort in native code", "SIGSEGV": "a crash in native code",
               "SIGKILL": "killed from outside, e.g. out of memory", "SIGBUS": "a crash in native code"}
        return f"was killed by {name} ({why.get(name, 'a signal')})"
    return f"exited with code {code} without an answer"


def _tail(log_path: str | os.PathLike | None) -> str:
    """The child's last lines that say why (third-party noise dropped), and where all its output went."""
    if not log_path or not Path(log_path).is_file() or Path(log_path).stat().st_size == 0:
        return ""
    from mobilize import noise

    last = noise.tail(Path(log_path).read_text(errors="replace").splitlines(), 2)
    return (f" (last: {' | '.join(last)[:300]})" if last else "") + f"; its output is in {log_path}"


def _rebuild(msg: Raised) -> MobilizeError:
    """The child's error as the same mobilize error type; ``child_traceback`` keeps its traceback for --debug."""
    from mobilize import errors

    cls = getattr(errors, msg.error_type, None)
    if msg.internal:
        err: MobilizeError = InternalError(msg.message)
    elif isinstance(cls, type) and issubclass(cls, UserError):
        err = cls(msg.message)
    else:
        err = UserError(msg.message)
    err.child_traceback = msg.trace
    return err


def _child_main(conn, func: Callable[..., Any], args: tuple, kwargs: dict, parent_pid: int,
                graceful_interrupt: bool = False) -> None:
    _die_with_parent(parent_pid)
    if graceful_interrupt:  # the parent passes an interrupt on as SIGTERM (SIGINT stays blocked here)
        signal.signal(signal.SIGTERM, _raise_interrupt)
    stage = "start"

    def progress(done: int, total: int, text: str) -> None:
        nonlocal stage
        stage = text
        conn.send(Step(done, total, text))

    try:
        value = func(*args, progress=progress, **kwargs)
        conn.send(Returned(value))
    except BaseException as exc:  # the isolation boundary: sent to the parent, which raises the same kind of error
        try:
            conn.send(_describe(exc, stage))
        except (BrokenPipeError, OSError):
            pass
    finally:
        conn.close()


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _describe(exc: BaseException, stage: str) -> Raised:
    from mobilize import errors

    trace = traceback.format_exc()
    if isinstance(exc, KeyboardInterrupt):  # the interrupt passed on by the parent, before any result
        return Raised("KeyboardInterrupt", "interrupted", False, trace)
    if isinstance(exc, MobilizeError):
        name = next(c.__name__ for c in type(exc).__mro__ if c.__module__ == errors.__name__)
        return Raised(name, str(exc), isinstance(exc, InternalError), trace)
    if isinstance(exc, SystemExit):
        return Raised("UserError", f"[{stage}] the model's code called sys.exit({exc.code!r})", False, trace)
    # Anything else escaping mobilize's own code is treated as the in-process CLI treats it: a bug.
    return Raised("InternalError", f"{type(exc).__name__}: {errors.headline(exc)}", True, trace)


def _die_with_parent(parent_pid: int) -> None:
    """Linux: the child gets SIGKILL when the parent dies (even by SIGKILL), so no orphan keeps working."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
