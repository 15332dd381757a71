"""A real SSH server for the device tests: Debian's openssh-server (``sshd``) started on 127.0.0.1 on a free port,
with its own host key, an authorized key and an ssh_config in a temp folder, stopped (with every session it
started) at the end.  Only the loopback address; nothing of the machine's own ssh set-up is read or changed.

    with LoopbackSshd(tmp_path) as sshd:
        sshd.url        # ssh://USER@127.0.0.1:PORT
        sshd.config     # the ssh_config naming the key and the known host (devices add --ssh-config)
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
MISSING = None if SSHD and shutil.which("ssh") and shutil.which("ssh-keygen") else (
    "no OpenSSH server here (Debian: apt-get install openssh-server; scripts/setup.sh installs it as root)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackSshd:
    def __init__(self, folder: Path, force_command: str | None = None) -> None:
        self.folder = Path(folder)
        self.force_command = force_command
        """What every login runs instead of its command (which it finds in $SSH_ORIGINAL_COMMAND): the arm64
        test's entry into the arm64 root."""
        self.user = getpass.getuser()
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    def __enter__(self) -> "LoopbackSshd":
        d = self.folder
        d.mkdir(parents=True, exist_ok=True)
        for key in ("host_key", "client_key"):
            if (d / key).exists():  # started again after a kill: the same keys
                continue
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
        (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
        host_pub = (d / "host_key.pub").read_text().split()
        (d / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\nPidFile {d / 'sshd.pid'}\nPasswordAuthentication no\n"
            f"KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
            f"AcceptEnv none\nSubsystem sftp internal-sftp\n"
            + (f"ForceCommand {self.force_command}\n" if self.force_command else ""))
        self.config = d / "ssh_config"
        self.config.write_text(
            f"Host 127.0.0.1\n  IdentityFile {d / 'client_key'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {d / 'known_hosts'}\n  StrictHostKeyChecking yes\n")
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", exist_ok=True)  # privilege separation's empty folder
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=subprocess.DEVNULL,
                                     stderr=open(d / "sshd.log", "ab"), start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(d / 'sshd.log').read_text()[-500:]}")
            time.sleep(0.1)
        raise RuntimeError("sshd did not listen within 20 s")

    def kill(self) -> None:
        """The server and every sshd session process it started, at once (a dropped connection, a board gone):
        what the sessions ran is left to notice it alone, as on a real board."""
        if self.proc is None:
            return
        for pid in [self.proc.pid, *descendants(self.proc.pid, "sshd")]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self.proc = None

    def __exit__(self, *exc) -> None:
        self.kill()


def descendants(root: int, comm: str | None = None) -> list[int]:
    """Every process below ``root`` (optionally only those whose name starts with ``comm``)."""
    parent, name = {}, {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            name[int(d.name)] = stat[stat.index("(") + 1:stat.rindex(")")]
            parent[int(d.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return [p for p in out if comm is None or name.get(p, "").startswith(comm)]


def arm64_login(folder: Path, rootfs: Path, cpu: str) -> Path:
    """A login that enters the arm64 root under QEMU (``cpu``), as compare's own arm64 child enters it
    (:func:`mobilize.arm64.run.child_command`): its own mount namespace, /proc, the emulated CPU's /proc/cpuinfo and
    /sys, then chroot, the login's command run there by the root's shell with the root's Python packages."""
    from mobilize.arm64.run import describe_cpu

    cpu_dir = folder / "cpu"
    if not cpu_dir.exists():
        describe_cpu(cpu_dir, cpu)
    script = folder / "enter-arm64-root"
    inner = ('mount -t proc proc "$0/proc" && mount --bind "$1/cpuinfo" "$0/proc/cpuinfo" && '
             'mount --bind "$1/sys" "$0/sys" && exec chroot "$0" /usr/bin/env -i QEMU_CPU=' + cpu +
             ' HOME=/tmp PATH=/usr/sbin:/usr/bin:/sbin:/bin PYTHONNOUSERSITE=1 PYTHONPATH=/opt/mobilize/site '
             '/bin/sh -c "$SSH_ORIGINAL_COMMAND"')
    script.write_text("#!/bin/sh\n# the login's command, run inside the arm64 root under QEMU\n"
                      f"exec unshare --mount --propagation private -- sh -c '{inner}' {rootfs} {cpu_dir}\n")
    script.chmod(0o755)
    return script
