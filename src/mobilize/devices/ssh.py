"""A Linux machine reached over SSH, as a device: the user's own OpenSSH client, config and agent (``BatchMode``:
no password is asked or stored; host keys are checked as ssh checks them), one multiplexed connection per run
(``ControlMaster``, closed at the end).

Everything mobilize puts on the device lives in one cache folder there (default ``~/.cache/mobilize-device``):

* ``pkg/HASH/mobilize``: mobilize's own package (its Python modules; the zoo's weights left out), keyed by the hash
  of its content, pushed once;
* ``files/SHA-NAME``: every file a run sends, named by the hash of its content, pushed once (a second run with the
  same files pushes nothing, and says so);
* ``runs/ID``: one request's folder (links to the files, inputs.npz, request.json, what the child writes), removed
  when the request ends, on Ctrl-C too.

The child (:mod:`mobilize.devices.child`) runs with the device's Python (``python3``, or the one the device entry
names), which needs numpy, torch and each engine's runtime (``mobilize devices check`` says which import there); it
watches its stdin, which is the connection: when the connection drops or the host stops the run, it exits.
Nothing is installed outside the cache folder; ``mobilize devices clean NAME`` removes it.
"""

from __future__ import annotations

import hashlib
import io
import os
import shlex
import shutil
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mobilize.core.errors import ConfigError, UserError
from mobilize.devices.base import Device, DeviceLost, run_process

DEFAULT_CACHE = "~/.cache/mobilize-device"
LOST = 255
"""ssh's own exit status: the connection failed or dropped (the remote command's status otherwise)."""
PACKAGE_SKIP = ("__pycache__", "weights")
"""Folders of mobilize's package never pushed: bytecode, and the zoo's weights (the device runs files, not models)."""


def parse_url(url: str) -> tuple[str | None, str, int | None]:
    """``ssh://[user@]host[:port]`` -> (user, host, port).

        >>> parse_url("ssh://pi@raspberrypi.local:2222")
        ('pi', 'raspberrypi.local', 2222)
        >>> parse_url("ssh://jetson")
        (None, 'jetson', None)
    """
    parts = urlsplit(url)
    if parts.scheme != "ssh" or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise ConfigError(f"'{url}' is not a device address", hint="write ssh://[user@]host[:port]")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"'{url}': the port is not a number from 1 to 65535") from None
    return parts.username, parts.hostname, port


def remote_path(path: str) -> str:
    """A folder on the device as its shell reads it: ``~/x`` under the login's home, quoted either way."""
    if path == "~" or path.startswith("~/"):
        rest = path[2:]
        return '"$HOME"' + (f"/{shlex.quote(rest)}" if rest else "")
    return shlex.quote(path)


def package_tree() -> tuple[str, bytes]:
    """mobilize's package as a gzipped tar (deterministic: sorted, no times or owners) and the hash that keys it."""
    import gzip

    import mobilize

    root = Path(mobilize.__file__).resolve().parent
    paths = sorted(p for p in root.rglob("*") if p.is_file() and not any(s in p.relative_to(root).parts
                                                                             for s in PACKAGE_SKIP))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in paths:
            data = p.read_bytes()
            info = tarfile.TarInfo(f"mobilize/{p.relative_to(root).as_posix()}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return hashlib.sha256(raw).hexdigest()[:20], gzip.compress(raw, mtime=0)


def file_key(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return f"{h.hexdigest()[:20]}-{path.name}"


class SshDevice(Device):
    kind = "ssh"

    def __init__(self, name: str, url: str, *, python: str = "python3", cache: str = DEFAULT_CACHE,
                 ssh_config: str | None = None) -> None:
        super().__init__(name)
        self.url, self.python, self.cache, self.ssh_config = url, python, cache, ssh_config
        self.user, self.host, self.port = parse_url(url)
        self._control: str | None = None
        self._package: str | None = None
        self._counted: set[str] = set()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "url": self.url, "python": self.python, "cache": self.cache}

    # -- the connection -------------------------------------------------------------------
    def _options(self) -> list[str]:
        if self._control is None:
            # a Unix socket's path holds 108 bytes: not under a long $TMPDIR
            self._control = tempfile.mkdtemp(prefix="mobilize-ssh-", dir="/tmp" if os.path.isdir("/tmp") else None)
        opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
                "-o", "ServerAliveCountMax=3", "-o", "ControlMaster=auto", "-o", f"ControlPath={self._control}/%C",
                "-o", "ControlPersist=300", "-o", "LogLevel=ERROR"]
        if self.ssh_config:
            opts += ["-F", self.ssh_config]
        if self.port:
            opts += ["-p", str(self.port)]
        return opts

    def _destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def ssh_command(self, script: str) -> list[str]:
        return ["ssh", *self._options(), self._destination(), script]

    def sh(self, script: str, *, timeout_s: float = 60.0, stdin_data: bytes | None = None, keep_stdin: bool = False,
           log_path: str | None = None, what: str = "") -> str:
        """``script`` run by the device's shell; a lost connection is :class:`DeviceLost`, a failed command a
        UserError with its stderr."""
        if shutil.which("ssh") is None:
            raise ConfigError("no ssh client on this machine (install OpenSSH's client)")
        done = run_process(self.ssh_command(script), timeout_s=timeout_s, log_path=log_path,
                           what=what or f"device {self.name}", stdin_data=stdin_data, keep_stdin=keep_stdin)
        if done.returncode == LOST and not self._answers():
            exc = DeviceLost(f"device {self.name} ({self.url}): the connection was lost or refused: "
                             f"{done.stderr_tail or 'ssh exited with 255'}")
            exc.stdout = done.stdout
            raise exc
        if done.returncode == LOST:  # ssh's status for a remote command killed by a signal, too
            exc = UserError(f"{what or 'device ' + self.name}: the process on the device was killed by a signal "
                            f"(its runtime crashed){': ' + done.stderr_tail if done.stderr_tail else ''}")
            exc.stdout = done.stdout
            raise exc
        if done.returncode != 0:
            exc = UserError(f"{what or 'device ' + self.name}: {done.how()}: {done.stderr_tail}")
            exc.stdout = done.stdout
            raise exc
        return done.stdout

    def _answers(self) -> bool:
        """Whether the device still answers (after ssh's 255: a lost connection, or a command killed by a signal)."""
        done = run_process(self.ssh_command("true"), timeout_s=30, log_path=None, what=f"device {self.name}")
        return done.returncode == 0

    def close(self) -> None:
        if self._control is None:
            return
        import subprocess

        subprocess.run(["ssh", *self._options(), "-O", "exit", self._destination()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=15)
        shutil.rmtree(self._control, ignore_errors=True)
        self._control = None

    # -- pushing --------------------------------------------------------------------------
    def _ensure_package(self, root: str) -> str:
        key, blob = package_tree()
        if self._package == key:
            return key
        have = self.sh(f"mkdir -p {root}/pkg {root}/files {root}/runs && test -d {root}/pkg/{key} && echo yes || true")
        if "yes" not in have:
            tmp = f"{root}/pkg/.{key}.$$"
            self.sh(f"mkdir -p {tmp} && tar -xzf - -C {tmp} && (mv {tmp} {root}/pkg/{key} 2>/dev/null || "
                    f"rm -rf {tmp})", stdin_data=blob, timeout_s=300, what=f"pushing mobilize to {self.name}")
            self._count(key, len(blob))
        else:
            self._count(key, None)
        self._package = key
        return key

    def _count(self, key: str, size: int | None) -> None:
        """One file pushed (``size`` bytes) or found on the device already (None), counted once per run."""
        if key in self._counted:
            return
        self._counted.add(key)
        if size is None:
            self.pushed["already_there"] += 1
        else:
            self.pushed["files"] += 1
            self.pushed["bytes"] += size

    def _push_files(self, folder: Path, root: str) -> dict[str, str]:
        """Every file of the request on the device, by content hash (only the missing ones sent): name -> key."""
        links = {p.name: p.resolve() for p in sorted(folder.iterdir()) if p.is_symlink() and not _inline(p)}
        keys = {name: file_key(src) for name, src in links.items()}
        have = set(self.sh(f"ls {root}/files").split())
        for name, key in keys.items():
            if key in have:
                self._count(key, None)
                continue
            tmp = f"{root}/files/.{key}.$$"
            self.sh(f"cat > {tmp} && mv {tmp} {root}/files/{shlex.quote(key)}", stdin_data=links[name].read_bytes(),
                    timeout_s=600, what=f"pushing {links[name].name} to {self.name}")
            self._count(key, links[name].stat().st_size)
            have.add(key)
        return keys

    def execute(self, folder: Path, phase: str, timeout_s: float, log_path: str | None) -> str:
        """Push what is missing, run the child in a run folder on the device, bring back what it wrote, remove the
        run folder (on Ctrl-C too, the child stopped first)."""
        root = remote_path(self.cache)
        key = self._ensure_package(root)
        keys = self._push_files(folder, root)
        run = f"{root}/runs/{uuid.uuid4().hex[:12]}"
        small = io.BytesIO()
        with tarfile.open(fileobj=small, mode="w") as tar:
            for p in folder.iterdir():
                if not p.is_symlink() or _inline(p):
                    tar.add(p.resolve(), arcname=p.name)
        links = " && ".join(f"ln -s ../../files/{shlex.quote(k)} {run}/{shlex.quote(n)}" for n, k in keys.items())
        self.sh(f"mkdir -p {run} && tar -xf - -C {run}" + (f" && {links}" if links else ""),
                stdin_data=small.getvalue(), what=f"sending the request to {self.name}")
        child = (f"cd {run} && echo $$ > pid && PYTHONPATH={root}/pkg/{key}${{PYTHONPATH:+:$PYTHONPATH}} "
                 f"PYTHONDONTWRITEBYTECODE=1 "
                 f"PYTHONNOUSERSITE=1 exec {shlex.quote(self.python)} -m mobilize.devices.child {run} {phase} "
                 f"--watch-stdin")
        try:
            out = self.sh(child, timeout_s=timeout_s, keep_stdin=True, log_path=log_path,
                          what=f"{phase} on {self.name}")
            wanted = {"check": "machine.json outputs.npz", "time": "timing.json"}.get(phase)
            if wanted:
                _untar(self.sh(f"tar -cf - -C {run} {wanted} | base64", timeout_s=600), folder, wanted.split())
            return out
        finally:
            self._cleanup(run)

    def _cleanup(self, run: str) -> None:
        try:
            self.sh(f"test -f {run}/pid && kill $(cat {run}/pid) 2>/dev/null; rm -rf {run}", timeout_s=20)
        except UserError:
            pass  # the device is gone: its child exits when its stdin (the connection) closes

    def clean(self) -> str:
        """Remove the cache folder on the device; says what it held."""
        root = remote_path(self.cache)
        held = self.sh(f"du -sk {root} 2>/dev/null | cut -f1; rm -rf {root}").strip()
        return f"removed {self.cache} on {self.name} ({int(held or 0) / 1024:.1f} MB)" if held else \
            f"{self.cache} on {self.name} was not there"


def _inline(path: Path) -> bool:
    """A file sent with the request itself, not kept in the cache: a manifest (small, and it names the path the file
    was built at, so it differs every run)."""
    return path.name.endswith(".manifest.json")


def _untar(text: str, folder: Path, names: list[str]) -> None:
    """The child's files, as ``tar | base64`` sent them, into ``folder`` (only the names asked for)."""
    import base64

    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(text)), mode="r") as tar:
        for name in names:
            member = tar.getmember(name)
            if not member.isfile():
                raise UserError(f"the device sent {name} as something other than a file")
            (folder / name).write_bytes(tar.extractfile(member).read())


def loads_entry(name: str, entry: dict[str, Any]) -> SshDevice:
    return SshDevice(name, entry["url"], python=entry.get("python") or "python3",
                     cache=entry.get("cache") or DEFAULT_CACHE, ssh_config=entry.get("ssh_config"))

