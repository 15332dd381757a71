"""The one process engine: a spawned (or fork-served) child, its pipe, its stderr, its time limit and its end.

:func:`mobilize.pipeline.isolate.run_isolated` (one call, one answer) and compare's workers (a long-lived
request/response process) are two uses of :class:`Child`.  A child never sees Ctrl-C (the parent decides
what an interrupt stops), dies with its parent (Linux ``PR_SET_PDEATHSIG``), may send its stderr to a log
file, and is killed when it is silent past a deadline; a child that dies without answering is described
by how it died (the signal and what it usually means).

    >>> child = Child(echo_twice, ("hi",))
    >>> child.recv(60), child.recv(60)
    ('hi', 'hi')
    >>> child.finish(); child.process.exitcode
    0
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import multiprocessing.context
import os
import signal
import threading
from pathlib import Path
from typing import Any, Callable

from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.context import set_spawning_popen

from mobilize.core.interrupts import interrupts_deferred

PRELOAD = ("mobilize.pipeline.process", "torch", "mobilize.compare.worker")
"""What the fork server of ``preload`` children imports once.  The server is started from :func:`start_ignoring_sigint`
like every child, so it and every child forked from it keep SIGINT blocked; a child forked from it dies with this process
(it watches this process's pidfd; ``PR_SET_PDEATHSIG`` covers the server), and the server exits once this process
and its children have ended (its "alive" pipe closes)."""
DECODER_PRELOAD = PRELOAD + ("transformers.modeling_utils", "transformers.models.llama.modeling_llama",
                             "mobilize.lowering.causal_lm", "mobilize.compare.decoder_worker")
"""A second server's modules, for the children that load a transformers model anyway (a decoder's reference, its
builds, an eager file's check): transformers brings torch._dynamo, sympy, scipy and torchao, 5-6 s of imports in each
such child (measured on a 2-core AVX2 EPYC), paid once per command instead.  A child that never loads transformers
(another engine's check) forks from the torch server, so the peak memory reported for its file is not inflated by
modules it never imported."""


class Lost(Exception):
    """The child gave no answer: silent past its deadline (it has been killed), or dead."""

    def __init__(self, timed_out: bool, exitcode: int | None):
        super().__init__("timed out" if timed_out else death(exitcode))
        self.timed_out, self.exitcode = timed_out, exitcode


class Child:
    """``target(conn, *args)`` in a spawned process; ``recv``/``send`` talk to it over one pipe.

    ``log_path``: where the child's stderr goes when ``capture_stderr`` (else it writes wherever the parent's
    stderr points, which the CLI may have redirected to that same file).  ``on_start(child)`` runs as soon as
    the process exists, before an interrupt can cut in (the caller registers it to stop it later).
    ``graceful_interrupt``: SIGTERM becomes a KeyboardInterrupt in the child (see :meth:`interrupt`).
    ``preload``: fork the child from a server that has imported torch once (:data:`PRELOAD`; or the modules named,
    such as :data:`DECODER_PRELOAD`: one server per set) instead of spawning a fresh interpreter that imports it
    again (about 2 s of CPU per child; compare starts one per export and per check); only for children that import
    those modules anyway (a lean timing worker must not carry torch)."""

    def __init__(self, target: Callable[..., None], args: tuple = (), *, log_path: str | os.PathLike | None = None,
                 capture_stderr: bool = False, graceful_interrupt: bool = False,
                 on_start: Callable[["Child"], None] | None = None, preload: bool | tuple[str, ...] = False):
        if preload:
            # a fork server starts multiprocessing's resource tracker first, which unblocks SIGINT in the calling
            # thread when it starts it (bpo-33613's mask, undone with SIG_UNBLOCK): started here, before the mask
            # below, the server and every child forked from it keep SIGINT blocked
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()
        from mobilize.core.paths import make_temp_dir

        self.conn, child_end = multiprocessing.Pipe()
        self.log_path = str(log_path) if log_path else None
        # the child's temporary files (its own and its libraries') go here, and this process removes the folder when
        # the child ends, however it ended: a child killed mid-export (SIGKILL runs no clean-up) leaves nothing
        self.temp_dir: Path | None = make_temp_dir("child")
        kind = _ServedProcess if preload else multiprocessing.get_context("spawn").Process
        self.process = kind(target=_bootstrap, daemon=True, args=(
            child_end, target, args, os.getpid(), self.log_path if capture_stderr else None, graceful_interrupt,
            str(self.temp_dir)))
        if preload:
            self.process.preload = PRELOAD if preload is True else tuple(preload)
        try:
            start_ignoring_sigint(self.process, on_start=on_start and (lambda: on_start(self)))
        except BaseException:  # interrupted as it started: it must not outlive this call
            self.kill()
            raise
        finally:
            child_end.close()

    # -- talking ----------------------------------------------------------------------------
    def recv(self, timeout_s: float | None) -> Any:
        """The child's next message; :class:`Lost` when it is silent for ``timeout_s`` (then killed) or died."""
        if timeout_s is not None and (timeout_s <= 0 or not self.conn.poll(timeout_s)):
            self.kill()
            raise Lost(True, None)
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(10)
            raise Lost(False, self.process.exitcode) from None

    def send(self, msg: Any) -> None:
        """Send, unless the child is gone (its death is reported by the next ``recv``)."""
        try:
            self.conn.send(msg)
        except (BrokenPipeError, OSError):
            pass

    # -- facts ------------------------------------------------------------------------------
    def rss_mb(self) -> float:
        """Resident memory now (0 once it has ended)."""
        try:
            with open(f"/proc/{self.process.pid}/statm") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except (OSError, ValueError, IndexError):
            return 0.0

    def peak_rss_mb(self) -> float:
        """Its peak resident memory since it started (Linux ``VmHWM``; 0 once it has ended)."""
        try:
            with open(f"/proc/{self.process.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024.0
        except (OSError, ValueError, IndexError):
            pass
        return 0.0

    def log_tail(self, lines: int = 3) -> str:
        """The last lines the child wrote to its log, for a failure's note ('' without a log)."""
        from mobilize.core import noise
        if not self.log_path or not Path(self.log_path).is_file():
            return ""
        text = noise.tail(Path(self.log_path).read_text(errors="replace").splitlines(), lines)
        return f" [stderr: {' | '.join(text)[:400]}]" if text else ""

    def where_output_went(self) -> str:
        """The child's last lines that say why (third-party noise dropped), and where all its output went ('' when
        nothing was written there)."""
        from mobilize.core import noise
        path = self.log_path
        if not path or not Path(path).is_file() or Path(path).stat().st_size == 0:
            return ""
        last = noise.tail(Path(path).read_text(errors="replace").splitlines(), 2)
        return (f" (last: {' | '.join(last)[:300]})" if last else "") + f"; its output is in {path}"

    def alive(self) -> bool:
        return self.process.is_alive()

    # -- ending -----------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Ask a ``graceful_interrupt`` child to stop and answer with what it has (SIGINT stays blocked there)."""
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.process.pid is not None:  # started
            if self.process.is_alive():
                self.process.kill()
            self.process.join(10)
            end_group(self.process.pid)  # what the child's own code started (a metric's fork) ends with it
        if self.temp_dir is not None and not self.process.is_alive():
            import shutil

            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None

    def finish(self, timeout_s: float = 30.0) -> None:
        """Let a child that has sent its answer exit by itself (so it cleans up), then make sure."""
        self.process.join(timeout_s)
        self.kill()

    def close(self) -> None:
        self.kill()
        self.conn.close()


_SERVERS: dict[tuple[str, ...], Any] = {}
_SERVERS_LOCK = threading.Lock()


def stop_servers() -> None:
    """Stop this process's fork servers and multiprocessing's resource tracker, and reap them: left to end by
    themselves when the command exits, each was a ``<defunct>`` child re-parented to init for up to 2 s after it
    (what a script that waits for the command's children sees).  Called once the command's own children are gone.
    Both stop as Python's own tests stop them (``_stop``: close the descriptor they watch, wait for the exit)."""
    from multiprocessing import resource_tracker

    with _SERVERS_LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in [*servers, resource_tracker._resource_tracker]:
        with contextlib.suppress(OSError, ChildProcessError, AttributeError):
            server._stop()


def _server(preload: tuple[str, ...]) -> Any:
    """This process's fork server of ``preload`` (started by its first child)."""
    from multiprocessing.forkserver import ForkServer

    with _SERVERS_LOCK:
        if preload not in _SERVERS:
            _SERVERS[preload] = ForkServer()
            _SERVERS[preload].set_forkserver_preload(list(preload))
        return _SERVERS[preload]


class _ServedProcess(multiprocessing.context.ForkServerProcess):
    """A process forked from the server of its ``preload`` modules.  multiprocessing's own forkserver start method
    keeps one server per process, with one set of modules; this one keeps a server per set, so a child is forked
    with what it will import anyway and no more (its peak memory is its own)."""

    preload: tuple[str, ...] = PRELOAD

    @staticmethod
    def _Popen(process_obj):
        return _ServedPopen(process_obj)


class _ServedPopen(popen_forkserver.Popen):
    def _launch(self, process_obj) -> None:
        """``popen_forkserver.Popen._launch`` (Python 3.11), asking the process's own server instead of the
        module's one; the child's side (``forkserver.get_inherited_fds``) is the same for every server."""
        prep_data = spawn.get_preparation_data(process_obj._name)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = _server(process_obj.preload).connect_to_new_process(self._fds)
        _parent_w = os.dup(w)  # the data pipe's write end, kept as a sentinel of the parent for the child
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


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


def end_group(pid: int) -> None:
    """SIGKILL what is left of the process group of the ended child ``pid`` (every child is its group's leader): the
    processes its code forked or spawned (a user metric's worker pool, a model's helper), which would otherwise go on
    running after the command, re-parented to init.  Linux keeps a pid from being reused while a group of that
    number exists, so the number names this child's group or none."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def death(code: int | None) -> str:
    """How a child that sent no answer ended, in words."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        why = {"SIGABRT": "an abort in native code", "SIGSEGV": "a crash in native code",
               "SIGKILL": "killed from outside, e.g. out of memory", "SIGBUS": "a crash in native code"}
        return f"was killed by {name} ({why.get(name, 'a signal')})"
    return f"exited with code {code} without an answer"


def echo_twice(conn, text: str) -> None:
    """A child for the docstring example: says ``text`` twice."""
    conn.send(text)
    conn.send(text)


def _bootstrap(conn, target: Callable[..., None], args: tuple, parent_pid: int, log_path: str | None,
               graceful_interrupt: bool, temp_dir: str) -> None:
    import tempfile

    _die_with_parent(parent_pid)
    with contextlib.suppress(OSError):  # its own process group: what it starts is ended with it (:func:`end_group`)
        os.setpgid(0, 0)
    os.environ["TMPDIR"] = tempfile.tempdir = temp_dir  # the parent removes it when this process ends
    if log_path:
        _stderr_to(log_path)
    else:  # writing to the parent's filtered terminal: the user's own lines must pass its filter
        from mobilize.core.noise import mark_user_lines

        mark_user_lines()
    if graceful_interrupt:  # the parent passes an interrupt on as SIGTERM (SIGINT stays blocked here)
        signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        target(conn, *args)
    finally:
        conn.close()


def _stderr_to(log_path: str) -> None:
    """This process's stderr (C++ runtimes' log lines, Python warnings) into its log file."""
    import sys

    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _die_with_parent(parent_pid: int) -> None:
    """Linux: the child gets SIGKILL when the parent dies (even by SIGKILL), so no orphan keeps working.

    A spawned child's parent is the caller: ``PR_SET_PDEATHSIG`` does it.  A child forked from the fork server has
    the server as its parent, and the server outlives the caller as long as any of its children hold its "alive"
    pipe, so such a child also watches the caller itself (a pidfd, readable when that process ends)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    parent = os.getppid()
    if parent == parent_pid:
        return
    if _parent_of(parent) != parent_pid:  # the parent (or the fork server's parent) died before prctl took effect
        os._exit(1)
    _watch(parent_pid)


def _watch(pid: int) -> None:
    """SIGKILL this process once ``pid`` has ended (a daemon thread blocked on its pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):  # no pidfd (Linux < 5.3): poll
        fd = None

    def wait() -> None:
        import select
        import time

        if fd is not None:
            select.select([fd], [], [])
        else:
            while _parent_of(pid) is not None:
                time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)

    if _parent_of(pid) is None:  # already gone
        os._exit(1)
    threading.Thread(target=wait, name="mobilize-parent-watch", daemon=True).start()


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
