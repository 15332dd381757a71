"""Third-party noise: the lines libraries write to stderr that say nothing a user can act on.

One list, used three ways: a command's stderr passes through :func:`filtered_terminal` (file
descriptor 2, so C++ runtimes' log lines too), a failed stage's log tail is :func:`tail` (noise
dropped, the lines that say why first), and a backend's own quieting reads :func:`patterns`.
Each engine names its own noise in its descriptor (``Backend.noise``); the libraries every engine
shares are named here.

    >>> is_noise("[W1127 01:31:21.015 Quantizer.cpp:111] Warning: torch.quantize_per_tensor ... deprecated")
    True
    >>> tail(["Loading weights: 100%|##########| 3/3", "ValueError: bad shape", "W0000 text_format.cc:1] x"], 2)
    ['ValueError: bad shape']
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import re
import sys
import threading
from typing import Any, Iterable, Iterator

from mobilize.core.interrupts import interrupts_deferred, on_abandon

SHARED_NOISE = (
    "Quantizer.cpp:",  # torch: quantized tensor creation is deprecated (every load of an int8 TorchScript file)
    "torch/utils/_pytree.py", "_pytree._register_pytree_node is deprecated",  # transformers on this torch
    "torchao", "Skipping import of cpp extensions",  # torchao's optional kernels ("Failed to load ...so")
    "absl::InitializeLog", "text_format.cc:",  # absl/protobuf, pulled in by the TensorFlow-based frontends
    "cpuinfo_utils.cpp", "Error in cpuinfo:",  # cpuinfo probing a VM's CPU
)
"""Noise from libraries no one engine owns."""

_PROGRESS = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\tINFO \w+\.py:\d+ -- ")
"""A tqdm progress bar (transformers' "Loading checkpoint shards: 100%|###| 2/2"); a Ray INFO record
("2026-11-27 02:00:01,123<TAB>INFO worker.py:1918 -- Started a local Ray instance.")."""

_MARK_BYTES = "\u2060\u200b".encode()
_END_BYTES = "\u2060\u2060mobilize-stderr-end\u2060\u2060\n".encode()
"""Written once by :func:`filtered_terminal` as it hands fd 2 back: once the reader has forwarded what came before it,
the terminal is handed back."""
HAND_BACK_WAIT_S = 2.0
"""How long the hand-back waits for the reader to pass the end marker (a reader stuck on a terminal nobody reads)."""

_REASON = re.compile(r"(Error|Exception|error:|failed|Failed|cannot|not supported|unsupported|expected|Traceback)")
"""A line that says why something failed."""


def patterns() -> tuple[str, ...]:
    from mobilize.core.backend import all_backends

    return SHARED_NOISE + tuple(p for b in all_backends() for p in b.noise)


def is_noise(line: str, known: Iterable[str] | None = None) -> bool:
    if line.lstrip().startswith("mobilize"):  # our own lines are never noise
        return False
    known = patterns() if known is None else known
    return bool(_PROGRESS.search(line)) or any(p in line for p in known)


def tail(lines: Iterable[str], n: int = 3) -> list[str]:
    """The last ``n`` lines worth reading: noise dropped, and lines that say why (an error, a failure)
    before the rest, each group in its original order."""
    known = patterns()
    kept = [ln.strip() for ln in lines if ln.strip() and not is_noise(ln, known)]
    reasons = [ln for ln in kept if _REASON.search(ln)]
    others = [ln for ln in kept if not _REASON.search(ln)]
    reasons = reasons[-n:] if n > 0 else []
    room = n - len(reasons)
    return reasons + (others[-room:] if room > 0 else [])


USER_MARK = "\u2060\u200b"
"""Starts a line the user's own code wrote through ``sys.stderr`` (invisible, were it ever shown): the filter
passes such a line whatever it says and takes the mark off."""
PIPE_ENV = "MOBILIZE_FILTERED_STDERR"
"""Names the filter's pipe (``device:inode``) for child processes: a child whose fd 2 is that pipe marks its
user's lines too (:func:`mark_user_lines`)."""


class UserLines:
    """``sys.stderr`` while fd 2 is the filter's pipe: a line written by the user's code (a ``print(...,
    file=sys.stderr)`` in their model's ``__init__`` or ``forward``) is marked, so the filter keeps it even when it
    reads like a runtime's log line (``[W:onnxruntime: my own message]``).  Lines that libraries write (the
    ``warnings`` and ``logging`` modules, tqdm, anything installed in site-packages or the standard library, or
    mobilize's own package) and the C++ runtimes' writes to fd 2 are filtered as before.  Where fd 2 is not the pipe
    (a log file), nothing is marked."""

    def __init__(self, inner: Any, pipe: tuple[int, int]):
        self._inner, self._pipe, self._at_start = inner, pipe, True

    def write(self, text: str) -> int:
        if text and self._users(sys._getframe(1)) and _fd2_is(self._pipe):
            out = []
            for piece in text.splitlines(keepends=True):
                out.append((USER_MARK if self._at_start else "") + piece)
                self._at_start = piece.endswith("\n")
            self._inner.write("".join(out))
        else:
            self._inner.write(text)
            self._at_start = text.endswith("\n") if text else self._at_start
        return len(text)

    @staticmethod
    def _users(frame: Any) -> bool:
        """Whether the code that called ``write`` is the user's: not a library's, nor mobilize's own (a C++
        extension that prints through ``sys.stderr`` shows as the Python code that called it: mobilize's runtime
        code, whose lines are judged by their words as before)."""
        where = os.path.realpath(frame.f_code.co_filename) if frame is not None else ""
        return not where.startswith((_OURS, *_library_dirs()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


_OURS = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep
"""mobilize's own package (its zoo too): not the user's code."""


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    """The standard library and site-packages folders: code there is a library's, not the user's."""
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(sorted(dirs))


def _fd2_is(pipe: tuple[int, int]) -> bool:
    try:
        st = os.fstat(2)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == pipe


def marking_into(fd: int) -> UserLines:
    """``sys.stderr`` marking the user's lines while fd 2 is the open file ``fd`` (a runtime's capture of fd 2)."""
    st = os.fstat(fd)
    inner = sys.stderr._inner if isinstance(sys.stderr, UserLines) else sys.stderr
    return UserLines(inner, (st.st_dev, st.st_ino))


def keeps_marks() -> bool:
    """Whether a marked line written to ``sys.stderr`` now reaches the filter that reads the mark (else the mark
    must come off first: a log file would keep it)."""
    return isinstance(sys.stderr, UserLines) and _fd2_is(sys.stderr._pipe)


def mark_user_lines() -> None:
    """In a child process: mark the user's lines as the parent's filter expects, where fd 2 is its pipe."""
    named = os.environ.get(PIPE_ENV, "")
    if not named or isinstance(sys.stderr, UserLines):
        return
    try:
        pipe = tuple(int(x) for x in named.split(":"))
    except ValueError:
        return
    if len(pipe) == 2 and _fd2_is(pipe):  # type: ignore[arg-type]
        sys.stderr = UserLines(sys.stderr, pipe)  # type: ignore[arg-type]


@contextlib.contextmanager
def _marking_user_lines() -> Iterator[None]:
    """``sys.stderr`` marks the user's lines while fd 2 is the filter's pipe, here and in children started
    meanwhile (:data:`PIPE_ENV`)."""
    st = os.fstat(2)
    pipe = (st.st_dev, st.st_ino)
    saved_obj, saved_env = sys.stderr, os.environ.get(PIPE_ENV)
    sys.stderr = UserLines(saved_obj, pipe)  # type: ignore[assignment]
    os.environ[PIPE_ENV] = f"{pipe[0]}:{pipe[1]}"
    try:
        yield
    finally:
        if isinstance(sys.stderr, UserLines):
            sys.stderr.flush()
            sys.stderr = saved_obj
        if saved_env is None:
            os.environ.pop(PIPE_ENV, None)
        else:
            os.environ[PIPE_ENV] = saved_env


@contextlib.contextmanager
def filtered_terminal(enabled: bool = True) -> Iterator[collections.deque]:
    """Pass this process's stderr (fd 2, inherited by its children) through a filter that drops noise lines.

    Yields the dropped lines (the last 200), for ``--debug`` or a bug report.  Lines reach the terminal as
    they are written (a reader thread forwards each one), so progress and errors keep their order.  A line the
    user's own code wrote through ``sys.stderr`` (:class:`UserLines`) always passes."""
    dropped: collections.deque = collections.deque(maxlen=200)
    try:
        sys.stderr.flush()
        os.fstat(2)
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr is not a file descriptor (captured by a test runner)
        enabled = False
    if not enabled:
        yield dropped
        return
    held: list = []  # (the terminal's fd 2, the end marker's write end, the reader's event) once set up

    def restore() -> None:
        if held:
            saved, end, caught_up = held.pop()
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            # wait for the reader to pass the end marker, not for the pipe's end: multiprocessing's fork server and
            # resource tracker hold the pipe as their fd 2 until this process exits (waiting cost 2 s a command);
            # the reader stays, a daemon, forwarding what they may still write
            with contextlib.suppress(OSError):
                os.write(end, _END_BYTES)
            os.close(end)
            caught_up.wait(timeout=HAND_BACK_WAIT_S)

    with on_abandon(restore):  # an interrupt that ends the process at once hands the terminal back too
        try:
            with interrupts_deferred():  # set up whole, so whatever comes undoes it
                held.append(_forward_stderr(patterns(), dropped))
            with _marking_user_lines():
                yield dropped
        finally:
            restore()


def _forward_stderr(known: Any, dropped: collections.deque) -> tuple[int, int, threading.Event]:
    """fd 2 into a pipe whose reader thread forwards each line but noise to the terminal; returns (the terminal's fd,
    a write end kept for :data:`_END_BYTES`, an event set once the reader has forwarded everything before it)."""
    saved = os.dup(2)
    terminal = os.dup(saved)  # the reader's own copy: it outlives ``saved`` if a child keeps the pipe open
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    caught_up = threading.Event()

    def show(out: Any, raw: bytes, newline: bytes) -> None:
        line = raw.decode("utf-8", "replace")
        if line.startswith(USER_MARK) or not is_noise(line, known):  # the user's own line: shown, whatever it says
            out.write(raw.replace(_MARK_BYTES, b"") + newline)
        else:
            dropped.append(line.replace(USER_MARK, ""))

    def forward() -> None:
        with os.fdopen(read_end, "rb", buffering=0) as pipe, os.fdopen(terminal, "wb", buffering=0) as out:
            pending = b""
            while chunk := pipe.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    if raw.endswith(_END_BYTES[:-1]):  # a child's unfinished line before it still shows
                        if raw := raw[:-len(_END_BYTES) + 1]:
                            show(out, raw, b"\n")
                        caught_up.set()
                    else:
                        show(out, raw, b"\n")
            if pending:
                show(out, pending, b"")
        caught_up.set()

    threading.Thread(target=forward, name="mobilize-stderr", daemon=True).start()
    return saved, write_end, caught_up


@contextlib.contextmanager
def into_log(path: "os.PathLike[str] | str") -> Iterator["os.PathLike[str] | str | None"]:
    """This process's stderr (fd 2: C++ runtimes' log lines; ``sys.stderr``: Python warnings such as numpy's
    RuntimeWarning) kept off the terminal for the duration and appended to ``path`` at the end, if anything was
    written (a run that dies leaves no log folder behind).  Yields ``path``, or None where stderr is not a file
    descriptor (a test runner's capture): then nothing is redirected."""
    import tempfile

    try:
        sys.stderr.flush()
        sys.stderr.fileno()
        os.fstat(2)
    except (AttributeError, OSError, ValueError):
        yield None
        return
    saved, saved_obj = os.dup(2), sys.stderr
    with tempfile.TemporaryFile() as held:
        try:
            os.dup2(held.fileno(), 2)
            sys.stderr = open(2, "w", buffering=1, closefd=False)
            yield path
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sys.stderr = saved_obj
            held.seek(0)
            text = held.read()
            if text:
                os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
                with open(path, "ab") as log:
                    log.write(text)
