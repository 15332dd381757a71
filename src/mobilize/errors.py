"""Error types.  User errors (bad input, bad config) and internal errors are different types.

A user error names the bad value, the valid options and the next step; the CLI prints it in
one or two lines and exits with code 2 (no traceback unless ``--debug``).

    >>> from mobilize.errors import ConfigError
    >>> str(ConfigError("unknown runtime 'tfl'", hint="choose one of: eager, onnxruntime"))
    "unknown runtime 'tfl' (choose one of: eager, onnxruntime)"
"""

from __future__ import annotations


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
