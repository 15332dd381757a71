"""Error types.  User errors (bad input, bad config) and internal errors are different types.

A user error names the bad value, the valid options and the next step; the CLI prints it in
one or two lines and exits with code 2 (no traceback unless ``--debug``).

    >>> from mobilize.core.errors import ConfigError
    >>> str(ConfigError("unknown runtime 'tfl'", hint="choose one of: eager, onnxruntime"))
    "unknown runtime 'tfl' (choose one of: eager, onnxruntime)"
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator


class MobilizeError(Exception):
    """Base of every error mobilize raises on purpose."""

    def __init__(self, message: str, *, hint: str | None = None, stage: str | None = None):
        self.message = message
        self.hint = hint
        self.stage = stage
        super().__init__(message)

    def __str__(self) -> str:
        text = self.message
        if self.stage:
            text = f"[{self.stage}] {text}"
        if self.hint:
            text = f"{text} ({self.hint})"
        return text


class UserError(MobilizeError):
    """Something the user can fix: a bad reference, file, spec, option or data source."""


class ConfigError(UserError):
    """A bad option, recipe, input spec or unknown registry name."""


class UnsupportedModelError(UserError):
    """The model cannot be loaded, scripted, traced or exported as asked."""


class UnsupportedByEngineError(UnsupportedModelError):
    """An engine's tool cannot take this model (its architecture, an attention or a shape the tool lacks) and says
    so before trying, naming what it takes: the variant is UNSUPPORTED, not a failed export."""


class ExportError(UserError):
    """An exporter failed; ``stage`` says where (export, lower, serialize, ...)."""


class BackendUnavailableError(UserError):
    """An optional backend (package or build feature) is missing; the message says what to install."""


class AccuracyError(UserError):
    """Outputs do not match the reference within tolerance; lists every mismatch."""


class InternalError(MobilizeError):
    """A bug in mobilize itself."""


def headline(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def tool_reason(log: str) -> str:
    """A child tool's own last error line from its output (llama.cpp's converter, onnxruntime-genai's builder, the
    optimum CLIs): an ``ERROR:`` log line's message or the exception a traceback ends with, else its last line.

    >>> tool_reason("Traceback ...\\nnncf.errors.InvalidGroupSizeError: group size 128\\n  more\\n")
    'nncf.errors.InvalidGroupSizeError: group size 128'
    >>> tool_reason("INFO:x\\nERROR:hf-to-gguf:Model MyNet is not supported\\n")
    'Model MyNet is not supported'
    """
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line.split(":", 2)[-1].strip() if line.startswith("ERROR:") else line for line in lines
              if line.startswith("ERROR:") or (": " in line and line.split(":")[0].endswith(("Error", "Exception")))]
    return (errors or lines or ["no output"])[-1][:300]


def clip(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, never cut mid-word: whole sentences where they fit, else whole
    words and an ellipsis.

    >>> clip("X is deprecated and will be removed in 2.10. Use Y instead.", 50)
    'X is deprecated and will be removed in 2.10.'
    >>> clip("one two three four", 12)
    'one two …'
    """
    import textwrap

    text = " ".join(text.split())
    if len(text) <= width:
        return text
    end = text.rfind(". ", 0, width)
    if end > width // 3:
        return text[: end + 1]
    return textwrap.shorten(text, width, placeholder=" …")


PROGRAMMING_ERRORS = (KeyError, AttributeError, NameError, IndexError, AssertionError, TypeError, ZeroDivisionError)
"""Exception types that, raised in Python code, mean that code is wrong (not the model or its inputs)."""


def raised_in(exc: BaseException, *files: str) -> bool:
    """True when ``exc`` is a programming error (KeyError, AttributeError, ...) raised by Python code in
    mobilize's own package (the zoo's model definitions excepted) or in one of ``files`` (a plugin's
    source file): a bug in that code, not a problem of the model or a third-party library it drove.
    Errors that native code raises (RuntimeError, ValueError) say something about the model or inputs."""
    import os

    import mobilize

    if not isinstance(exc, PROGRAMMING_ERRORS):
        return False
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = os.path.realpath(tb.tb_frame.f_code.co_filename)
    package = os.path.realpath(os.path.dirname(mobilize.__file__)) + os.sep
    ours = where.startswith(package) and not where.startswith(package + "zoo" + os.sep)
    return ours or any(where == os.path.realpath(f) for f in files if f)


def internal(exc: BaseException, where: str) -> "InternalError":
    """Wrap a bug in mobilize (or a plugin) so the CLI says so, exits 1 and keeps the cause for --debug."""
    err = InternalError(f"{where}: {type(exc).__name__}: {headline(exc)}")
    err.__cause__ = exc
    return err


def is_bug(exc: BaseException, *ours: str) -> bool:
    """True when ``exc`` is a bug in mobilize (or in one of ``ours``, a plugin's source file): an InternalError,
    or a programming error raised in that code (``raised_in``).  Every other failure is about the model,
    its inputs or a third-party library's verdict on them.  The one place this decision is made."""
    if isinstance(exc, MobilizeError):
        return isinstance(exc, InternalError)
    return raised_in(exc, *ours)


class Failure:
    """What ``third_party_failure`` caught: ``error`` (None when the block succeeded) and its ``reason``."""

    error: Exception | None = None

    def __bool__(self) -> bool:
        return self.error is not None

    @property
    def reason(self) -> str:
        return headline(self.error) if self.error is not None else ""


@contextlib.contextmanager
def third_party_failure(what: str, *ours: str) -> Iterator[Failure]:
    """Run a block that drives a third-party library or the user's model, for a caller that falls back or
    records the failure (a note, a probe's status) instead of raising: the block's exception is kept in the
    yielded ``Failure``.  mobilize's own errors pass through, and a bug in mobilize (``is_bug``; ``ours``
    are extra files whose programming errors are bugs) is raised as ``internal(exc, what)``.

        >>> with third_party_failure("tracing the model") as failed:
        ...     raise RuntimeError("data-dependent control flow")
        >>> failed.reason
        'data-dependent control flow'

    The one place in mobilize, with the CLI's last resort and the process boundaries, that catches
    ``Exception`` broadly (tests/test_architecture.py checks it)."""
    failure = Failure()
    try:
        yield failure
    except MobilizeError:
        raise
    except Exception as exc:
        if is_bug(exc, *ours):
            raise internal(exc, what) from exc
        failure.error = exc


@contextlib.contextmanager
def translate_errors(into: type[UserError] | Callable[[Exception], MobilizeError], what: str, *,
                     message: Callable[[Exception], str] | None = None, hint: str | None = None,
                     stage: str | None = None, ours: tuple[str, ...] = ()) -> Iterator[None]:
    """Raise a third-party failure inside the block as one user error: ``into(f"{what}: {headline(exc)}")``
    (``message(exc)`` instead when given; ``into`` may also be a function building the error from the
    exception).  mobilize's own errors pass unchanged; a bug in mobilize, or in one of ``ours``, is raised as
    ``internal(exc, what)`` (exit 1), never as the user's error."""
    with third_party_failure(what, *ours) as failed:
        yield
    exc = failed.error
    if exc is None:
        return
    if isinstance(into, type):
        text = message(exc) if message is not None else f"{what}: {headline(exc)}"
        raise into(text, hint=hint, stage=stage) from exc
    raise into(exc) from exc


def typed_headline(exc: BaseException) -> str:
    """``TypeName: first line`` (for messages where the library's exception type says something)."""
    return f"{type(exc).__name__}: {headline(exc)}"
