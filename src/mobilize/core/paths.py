"""Where commands write: output paths checked before any work, temporary names that say whose they
are, and the clean-up after a failed, interrupted or killed run.

Every temporary file or folder mobilize makes carries the id of the process that owns it
(``.m.mobilize-tmp-4242-x1y2.pte`` beside an artifact, ``/tmp/mobilize-compare-4242-ab12``);
the next run that looks at that folder removes the ones whose process is gone (killed with
SIGKILL, a power cut), so nothing accumulates.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from mobilize.core.errors import ConfigError
from mobilize.core.interrupts import work_begins

_OWNED = re.compile(r"(?:\..*\.|\.)?mobilize-(tmp|compare|staging|probe|sweep|child|bound)-(\d+)-")
"""Names of mobilize's temporaries (the whole start of the name): the kind, then the owning process's id."""


def safe_name(name: object, what: str) -> str:
    """``name`` when it can be one file-name component inside an output folder, else a ConfigError.

    The one check for every name that becomes a path (a recipe's or a plan variant's name, a model's
    stem, a sweep entry's folder): no path separator, no ``.``/``..``, no leading ``-`` (read as an
    option by the tools a user runs on the file), no NUL or other control character, not empty."""
    text = "" if name is None else str(name)
    separator = next((c for c in text if c in ("/", "\\")), None)
    why = ("it is empty" if not text.strip() else
           "it holds a NUL byte" if "\0" in text else
           f"it holds '{separator}'" if separator else
           "it is a path component ('.' or '..')" if text in (".", "..") else
           "it starts with '-'" if text.startswith("-") else
           "it holds a control character" if any(ord(c) < 32 or ord(c) == 127 for c in text) else
           "it is longer than 200 bytes" if len(text.encode()) > 200 else None)
    if why:
        raise ConfigError(f"{what} {text!r} cannot be used in a file name: {why}",
                          hint="use letters, digits, '-', '_' and '.'")
    return text


def temp_prefix(kind: str, name: str = "") -> str:
    """The start of a temporary's name: ``.NAME.mobilize-KIND-PID-`` (hidden) or ``mobilize-KIND-PID-``."""
    owned = f"mobilize-{kind}-{os.getpid()}-"
    return f".{name}.{owned}" if name else owned


def owner_pid(name: str) -> int | None:
    """The process id a temporary's name carries, None for any other name."""
    match = _OWNED.match(name)
    return int(match.group(2)) if match else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(folder: str | os.PathLike, depth: int = 2) -> list[Path]:
    """Remove mobilize's temporaries in ``folder`` (and ``depth - 1`` levels of subfolders) whose
    owning process is gone; returns what was removed.  Nothing else is touched."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        pid = owner_pid(entry.name)
        if pid is not None and pid != os.getpid() and not pid_alive(pid):
            path = Path(entry.path)
            try:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(path)
                else:
                    path.unlink()
                removed.append(path)
            except OSError:
                pass  # a file we may not remove is not ours to worry about
        elif depth > 1 and pid is None and entry.is_dir(follow_symlinks=False):
            removed += remove_stale(entry.path, depth - 1)
    return removed


def make_temp_dir(kind: str) -> Path:
    """A private folder in the system temp folder, named after this process; stale ones of killed runs go first."""
    remove_stale(tempfile.gettempdir(), depth=1)
    work_begins()  # an interrupt must now unwind to remove it (and what is made with it: a child's folder)
    return Path(tempfile.mkdtemp(prefix=temp_prefix(kind)))


def staging_dir(out: Path) -> Path:
    """A hidden folder inside ``out`` where a run writes its files until all of them are good."""
    work_begins()
    return Path(tempfile.mkdtemp(prefix=f".{temp_prefix('staging')}", dir=out))


def commit_staging(staging: Path, out: Path) -> dict[str, str]:
    """Move everything in ``staging`` into ``out`` (replacing same-named entries) and rewrite the
    staging path to the final one inside moved JSON files (manifests); returns {old path: new path}."""
    import json

    from mobilize.core.jsonfile import dumps

    moved: dict[str, str] = {}
    for entry in sorted(staging.iterdir()):
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(entry, target)
        moved[str(entry)] = str(target)
    for new in moved.values():
        for path in [Path(new)] if Path(new).is_file() else Path(new).rglob("*"):
            if path.suffix == ".json" and path.is_file():
                text = path.read_text()
                if str(staging) in text:
                    data = relocate(json.loads(text), staging, out)
                    path.write_text(dumps(data, indent=2, what=str(path)) + "\n")
    return moved


def relocate(value, old: Path, new: Path):
    """``value`` (JSON-like) with every path under ``old`` moved under ``new``, also inside text (a note that says
    ``sh out/.mobilize-staging-x/nnapi_benchmark.sh`` names the final script once the staging folder is gone).

        >>> relocate({"note": "run sh /o/.st/b.sh", "path": "/o/.st"}, Path("/o/.st"), Path("/o"))
        {'note': 'run sh /o/b.sh', 'path': '/o'}
    """
    prefix = str(old)
    if isinstance(value, str):
        if value == prefix:
            return str(new)
        return value.replace(prefix + os.sep, str(new) + os.sep)
    if isinstance(value, dict):
        return {k: relocate(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [relocate(v, old, new) for v in value]
    return value


def remove_previous(out: Path, names: tuple[str, ...]) -> list[str]:
    """Remove an earlier run's files and folders named ``names`` from ``out``; returns the names removed.
    Anything else in ``out`` is the user's and stays."""
    removed = []
    for name in names:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            removed.append(f"{name}/")
        elif path.exists() or path.is_symlink():
            path.unlink()
            removed.append(name)
    return removed


LOCK_NAME = ".mobilize.lock"
"""The lock file a command keeps in its output folder while it runs; it holds the owner's process id."""


def check_input_path(value: str | None, flag: str) -> None:
    """Refuse a path input that exists but is not a regular file or a folder (a FIFO, a socket, a device): reading
    one blocks or never ends.  ``value`` may be a reference such as ``net.py:Net`` or ``digits:test``: the whole
    text and the part before its last ``:`` are each checked when they name something that exists."""
    import stat

    if not value:
        return
    for candidate in dict.fromkeys([value, value.rpartition(":")[0]]):
        try:
            mode = os.stat(candidate).st_mode if candidate else None
        except (OSError, ValueError):  # absent (a zoo name, a module path) or not a path at all
            continue
        if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
                    "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
            raise ConfigError(f"{flag} {value}: {candidate} is {kind}, not a regular file or folder",
                              hint="save the data to a file first and give that file")


class FolderLock:
    """An output folder held by one run: ``LOCK_NAME`` inside it, ``flock``ed (the kernel lets go when the process
    ends, even by SIGKILL) and holding the owner's process id for the message another run prints.

    A lock file whose process is gone (a killed run's) is taken over; :attr:`note` then says so."""

    def __init__(self, folder: Path, flag: str) -> None:
        import fcntl

        self.path = folder / LOCK_NAME
        self.note = ""
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise ConfigError(f"cannot lock {flag} {folder}: {exc.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _read_pid(fd)
                os.close(fd)
                who = f"pid {holder}" if holder else "another process"
                raise ConfigError(f"{flag} {folder} is in use by another mobilize run ({who}); two runs writing one "
                                  f"folder would delete each other's files",
                                  hint=f"wait for it to end, or give another {flag} folder") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except OSError:
                same = False
            if same:  # not a file the previous holder unlinked while we waited for it
                break
            os.close(fd)
        previous = _read_pid(fd)
        if previous and previous != os.getpid():
            self.note = (f"{flag} {folder}: took over the lock of an earlier run (pid {previous}) that ended "
                         f"without releasing it")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink()
        except OSError:
            pass  # the folder is gone or read-only now: the lock goes with the descriptor
        os.close(self.fd)
        self.fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class Outputs:
    """The folders and files one command run will write: each checked before any work starts (it
    can be created and written), and, after a failure, the folders the run created removed again
    when nothing of value is in them.  :meth:`lock` holds a folder against a second run until :meth:`release`."""

    def __init__(self) -> None:
        import time

        self.created: list[Path] = []
        self.locks: list[FolderLock] = []
        self.folders: list[Path] = []
        """The output folders this run held (:meth:`lock`): a failed run's empty subfolders go from them, never
        from a folder another run holds."""
        self.started = time.time()

    def lock(self, path: str | os.PathLike, flag: str = "-o") -> str:
        """Hold the output folder ``path`` (checked with :meth:`folder` first) for this run; returns a note when a
        stale lock was taken over, else ''.  A folder another live run holds is a ConfigError naming its pid."""
        if any(held.path.parent.resolve() == Path(path).resolve() for held in self.locks):
            return ""  # the same folder given to two flags (-o and --emit-app)
        held = FolderLock(Path(path), flag)
        self.locks.append(held)
        self.folders.append(Path(path))  # held by this run: what it makes inside is its own to tidy
        return held.note

    def release(self) -> None:
        """Let go of every folder :meth:`lock` holds (at the end of the run, however it ended)."""
        while self.locks:
            self.locks.pop().release()

    def folder(self, path: str | os.PathLike, flag: str = "-o") -> Path:
        out = Path(path)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"output folder {out} is a file", hint=f"give a folder path with {flag}")
        self._mkdirs(out, flag)
        self._probe(out, flag, out)
        remove_stale(out)
        return out

    def file(self, path: str | os.PathLike, flag: str) -> Path:
        target = Path(path)
        if target.is_dir():
            raise ConfigError(f"{flag} {target} is a folder", hint=f"give a file name, e.g. {flag} "
                                                                    f"{target / 'result.json'}")
        if target.exists() and not target.is_file():
            raise ConfigError(f"{flag} {target} is not a regular file", hint="give a path to a new or ordinary file")
        self._mkdirs(target.parent, flag)
        self._probe(target.parent, flag, target)
        return target

    def _mkdirs(self, folder: Path, flag: str) -> None:
        missing = []
        for parent in [folder, *folder.parents]:
            if parent.exists():
                if not parent.is_dir():
                    raise ConfigError(f"cannot create {flag} folder {folder}: {parent} is a file")
                break
            missing.append(parent)
        for parent in reversed(missing):
            try:
                parent.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:
                raise ConfigError(f"cannot create {flag} folder {folder}: {exc.strerror}") from None
            self.created.append(parent)

    @staticmethod
    def _probe(folder: Path, flag: str, what: Path) -> None:
        """Write and remove a file: permissions, read-only mounts and pseudo file systems (/proc) all say no here."""
        try:
            fd, probe = tempfile.mkstemp(prefix=temp_prefix("probe", "write"), dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(f"cannot write {flag} {what}: {exc.strerror} in {folder}") from None

    def abandon(self) -> None:
        """An interrupt ends the process before the run has made anything else (:mod:`mobilize.core.interrupts`): the
        folders let go of, and those this run created removed."""
        self.release()
        self.discard()

    def discard(self) -> list[Path]:
        """After a failed run: remove the folders this run created that hold no file with content
        (an empty log is not content), and the empty folders it made inside its output folders (an interrupted
        build's ``artifacts/NAME/``: made since the run started, so a user's own empty folder stays); returns what
        was removed."""
        removed = []
        for out in self.folders:
            removed += _prune_empty(out, self.started)
        for folder in reversed(self.created):
            if folder.is_dir() and not _has_content(folder):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        return removed


def _prune_empty(root: Path, since: float) -> list[Path]:
    """The empty folders below ``root`` (not ``root``) made at ``since`` or later, removed deepest first (a folder that
    held only such folders goes too)."""
    removed = []
    for path, dirs, files in os.walk(root, topdown=False):
        here = Path(path)
        if here == root or files:
            continue
        try:
            # ctime: its creation (file times come from a coarse clock, a few ms behind time.time())
            if not any(here.iterdir()) and here.stat().st_ctime >= since - 0.05:
                here.rmdir()
                removed.append(here)
        except OSError:
            continue
    return removed


def _has_content(folder: Path) -> bool:
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                if os.path.getsize(os.path.join(root, name)) > 0:
                    return True
            except OSError:
                return True
    return False


def model_stem(reference: str) -> str:
    """A file-name stem for a model reference: zoo:mobilenet_v2 → mobilenet_v2, net.py:Net → Net."""
    tail = reference.split(":", 1)[1] if reference.startswith("zoo:") else reference
    if ":" in tail and tail.rpartition(":")[0].endswith(".py"):
        tail = tail.rpartition(":")[2]
    elif ":" in tail:
        tail = tail.rpartition(":")[2]
    return safe_name(Path(tail).stem or "model", f"the file-name stem of model '{reference}'")


def check_output_dir(out_dir) -> Path:
    """Fail before any work if the output folder cannot be used (created here if missing); stale
    temporaries of killed runs in it are removed."""
    return Outputs().folder(out_dir, "-o")


def arm64_root() -> Path:
    """Where the arm64 root lives (``MOBILIZE_ARM64_ROOT``, else ``~/.cache/mobilize/arm64``): the arm64 runs and
    the aarch64 cross builds both read it."""
    return Path(os.environ.get("MOBILIZE_ARM64_ROOT") or Path.home() / ".cache" / "mobilize" / "arm64")
