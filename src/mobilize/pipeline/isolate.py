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

import dataclasses
import os
import traceback
from typing import Any, Callable

from mobilize.core.errors import InternalError, MobilizeError, UserError
from mobilize.pipeline.process import Child, Lost


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
    """The mobilize.core.errors class of the error (UserError for anything the child cannot name)."""
    message: str
    internal: bool
    trace: str


def run_isolated(func: Callable[..., Any], *args: Any, what: str,
                 progress: Callable[[int, int, str], None] | None = None, log_path: str | os.PathLike | None = None,
                 timeout_s: float | None = None, crash_hint: str | None = None, graceful_interrupt: bool = False,
                 capture_stderr: bool = False, **kwargs: Any) -> Any:
    """``func(*args, progress=..., **kwargs)`` in a spawned process; its return value, or its error raised here.

    ``func`` must be importable (a module-level function) and its arguments picklable.  A child that
    dies without answering (a signal, ``os._exit``) raises a UserError naming the stage, the log file
    (``log_path``, where the caller sent stderr) and ``crash_hint``; one silent for ``timeout_s`` is killed.
    ``capture_stderr``: the child's stderr goes to ``log_path`` itself (the exporters' warnings stay off the
    terminal; a failure's last lines are read from the log)."""
    child = Child(_child_main, (func, args, kwargs), log_path=log_path, graceful_interrupt=graceful_interrupt,
                  capture_stderr=capture_stderr and log_path is not None)
    stage = "start"
    interrupted = False
    try:
        while True:
            try:
                try:
                    msg = child.recv(timeout_s)
                except Lost as lost:
                    if lost.timed_out:
                        raise UserError(f"the {what} process gave no answer within {timeout_s:g} s",
                                        stage=stage) from None
                    if interrupted:  # it died of the interrupt passed on to it
                        raise KeyboardInterrupt from None
                    raise UserError(f"the {what} process {lost}{child.where_output_went()}", stage=stage,
                                    hint=crash_hint) from None
                if isinstance(msg, Step):
                    stage = msg.text
                    if progress:
                        progress(msg.done, msg.total, msg.text)
                elif isinstance(msg, Returned):
                    child.finish(5)  # let it exit by itself; it has nothing left to write
                    return msg.value
                elif isinstance(msg, Raised):
                    if msg.error_type == "KeyboardInterrupt":
                        raise KeyboardInterrupt
                    child.finish(5)  # it has said all it will: let it exit by itself (its semaphores released)
                    raise _rebuild(msg)
            except KeyboardInterrupt:
                if not graceful_interrupt or interrupted or not child.alive():
                    raise
                interrupted = True  # the child stops and answers with what it has; a second interrupt kills it
                child.interrupt()
    finally:  # an error, Ctrl-C or SIGTERM here: the child goes at once
        child.close()


def _rebuild(msg: Raised) -> MobilizeError:
    """The child's error as the same mobilize error type; ``child_traceback`` keeps its traceback for --debug."""
    from mobilize.core import errors
    cls = getattr(errors, msg.error_type, None)
    if msg.internal:
        err: MobilizeError = InternalError(msg.message)
    elif isinstance(cls, type) and issubclass(cls, UserError):
        err = cls(msg.message)
    else:
        err = UserError(msg.message)
    err.child_traceback = msg.trace
    return err


def _child_main(conn, func: Callable[..., Any], args: tuple, kwargs: dict) -> None:
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


def _describe(exc: BaseException, stage: str) -> Raised:
    from mobilize.core import errors
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
