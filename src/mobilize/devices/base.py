"""One idea of a device: somewhere a file is loaded, checked on samples and timed.

A :class:`Device` kind says only how the device child (:mod:`mobilize.devices.child`) is started on a folder and
how the folder's files reach it: the host runs it as a process here, the arm64 root under QEMU
(:mod:`mobilize.devices.qemu`), a machine over SSH after pushing the files (:mod:`mobilize.devices.ssh`).  The rest is
here and the same for every kind: the request written (the arm64 child's wire format: request.json, inputs.npz,
the files; arrays only), the outputs and round lines read back.  A fifth kind (adb, a Ray node) is one module with
one class.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from mobilize.core.errors import UserError


class DeviceLost(UserError):
    """The device stopped answering (the connection dropped, the board rebooted): what was running there is lost;
    the host's work and the other devices go on."""


@dataclasses.dataclass
class FileCheck:
    """One file's outputs on the device (per sample, per output), or why it did not run there."""

    outputs: list[list[Any]] | None
    error: str | None = None
    runtime: str | None = None


@dataclasses.dataclass
class Timing:
    """What a device's timed rounds gave back: per file index, its times (``times_ns``, ``total_ns``,
    ``round_medians_ms``) or its error; the rounds' sensor lines; the machine's load; what cut the rounds short."""

    files: dict[int, dict[str, Any]]
    errors: dict[int, str]
    rounds: list[dict[str, Any]]
    load: dict[str, Any] | None
    lost: str | None = None


class Device:
    """A place files run.  ``execute`` is a kind's one job; ``place``, ``prepare`` and ``close`` have defaults."""

    kind = "?"
    emulated: str | None = None
    """Why this device's wall times are not latency (an emulator), or None."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pushed = {"files": 0, "bytes": 0, "already_there": 0}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind}

    def staging(self) -> Path | None:
        """Where the request folder is made here (None: the system's temp folder)."""
        return None

    def place(self, src: Path, dest: Path) -> None:
        """Put one file of the request into the folder (a link: the child only reads it)."""
        os.symlink(src.resolve(), dest)

    def execute(self, folder: Path, phase: str, timeout_s: float, log_path: str | None) -> str:
        """Run the child's ``phase`` on ``folder``; afterwards ``folder`` holds what the child wrote there.  Returns
        its stdout (the round lines).  Raises :class:`DeviceLost` when the device stopped answering."""
        raise NotImplementedError

    def probe(self) -> dict[str, Any]:
        """The device's facts (:func:`mobilize.devices.child.facts`), asking the device; a UserError when it cannot
        be reached or has no usable Python."""
        with self._folder() as folder:
            (folder / "request.json").write_text(json.dumps({"files": []}))
            out = self.execute(folder, "facts", 120.0, None)
        for line in out.splitlines():
            if line.startswith("{") and '"facts"' in line:
                return json.loads(line)["facts"]
        raise UserError(f"device {self.name}: the child printed no facts: {out.strip()[-300:]}")

    def close(self) -> None:
        """Release what the run held (an SSH master connection)."""

    # -- the request, the same for every kind ------------------------------------------------
    def _folder(self):
        import contextlib

        @contextlib.contextmanager
        def made():
            folder = Path(tempfile.mkdtemp(prefix="mobilize-device-", dir=self.staging()))
            try:
                yield folder
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        return made()

    def _write(self, folder: Path, files: Sequence[tuple[str | os.PathLike, str | None]],
               samples: Sequence[Sequence[Any]], threads: int, timing: dict[str, Any] | None = None) -> None:
        import numpy as np
        import torch

        names = []
        for k, (artifact, _) in enumerate(files):
            src = Path(artifact)
            names.append(f"{k}-{src.name}")
            self.place(src, folder / names[-1])
            manifest = src.with_name(src.name + ".manifest.json")
            if manifest.exists():
                self.place(manifest, folder / (names[-1] + ".manifest.json"))
        arrays = {f"s{i}_{j}": torch.as_tensor(t).detach().contiguous().numpy() for i, x in enumerate(samples)
                  for j, t in enumerate(x)}
        np.savez(folder / "inputs.npz", **arrays)
        (folder / "request.json").write_text(json.dumps({
            "files": [{"artifact": n, "runtime": r} for n, (_, r) in zip(names, files)], "threads": threads,
            "samples": len(samples), "inputs": len(samples[0]) if samples else 0, "timing": timing},
            allow_nan=False))

    def check(self, files: Sequence[tuple[str | os.PathLike, str | None]], samples: Sequence[Sequence[Any]], *,
              threads: int = 1, timeout_s: float = 900.0, log_path: str | None = None
              ) -> tuple[dict[str, Any], list[FileCheck]]:
        """Every (file, runtime) on ``samples`` in one child on the device: (the device's facts, each file's
        outputs or error)."""
        import numpy as np
        import torch

        with self._folder() as folder:
            self._write(folder, files, samples, threads)
            self.execute(folder, "check", timeout_s, log_path)
            report = json.loads((folder / "machine.json").read_text())
            machine = {k: v for k, v in report.items() if k != "files"}
            runs = []
            with np.load(folder / "outputs.npz") as z:
                for k, job in enumerate(report["files"]):
                    if "error" in job:
                        runs.append(FileCheck(None, job["error"]))
                        continue
                    outs = [[torch.from_numpy(z[f"f{k}_s{i}_{j}"].copy()) for j in range(job["outputs"])]
                            for i in range(len(samples))]
                    runs.append(FileCheck(outs, None, job.get("runtime")))
        return machine, runs

    def time(self, files: Sequence[tuple[str | os.PathLike, str | None]], sample: Sequence[Any], *, rounds: int,
             iterations: int, warmup: int = 3, threads: int = 1, timeout_s: float = 900.0,
             log_path: str | None = None) -> Timing:
        """Every file timed in interleaved rounds on the device (``sample``; ``warmup`` untimed calls of each file
        first); a connection lost mid-way keeps the rounds whose lines arrived and says what cut them short."""
        with self._folder() as folder:
            self._write(folder, files, [sample], threads,
                        {"rounds": rounds, "iterations": iterations, "warmup": warmup})
            try:
                out, lost = self.execute(folder, "time", timeout_s, log_path), None
            except DeviceLost as exc:
                out, lost = getattr(exc, "stdout", ""), str(exc)
            lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
            rounds = [ln for ln in lines if "round" in ln]
            if lost is None:
                result = json.loads((folder / "timing.json").read_text())
                return Timing({int(k): v for k, v in result["files"].items()},
                              {int(k): v for k, v in result["errors"].items()}, rounds, result.get("load"))
        medians: dict[int, list[float]] = {}
        for ln in rounds:
            for k, ms in ln["medians_ms"].items():
                medians.setdefault(int(k), []).append(ms)
        partial = {k: {"times_ns": [], "total_ns": 0, "round_medians_ms": m} for k, m in medians.items()}
        return Timing(partial, {}, rounds, None, lost)


@dataclasses.dataclass
class Finished:
    """A child process that ended: its exit status (negative: killed by that signal), stdout, stderr's last lines."""

    returncode: int
    stdout: str
    stderr_tail: str

    def how(self) -> str:
        import signal

        return (f"killed by {signal.Signals(-self.returncode).name}" if self.returncode < 0
                else f"exited with code {self.returncode}")


def run_process(command: list[str], *, timeout_s: float, log_path: str | None, what: str,
                env: dict[str, str] | None = None, stdin_data: bytes | None = None, keep_stdin: bool = False
                ) -> Finished:
    """``command`` in its own process group (a timeout or Ctrl-C kills it and all it started); its stderr appended to
    ``log_path`` where given.  ``keep_stdin``: stdin stays an open pipe until it ends (the SSH child's watch).  A
    timeout is a UserError naming ``what``."""
    import signal
    import subprocess

    err_path = log_path or os.devnull
    with open(err_path, "ab") as log, tempfile.TemporaryFile() as err:
        stdin = subprocess.PIPE if (keep_stdin or stdin_data is not None) else subprocess.DEVNULL
        proc = subprocess.Popen(command, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True)
        try:
            if keep_stdin and stdin_data is None:
                out, _ = _communicate_open(proc, timeout_s)
            else:
                out, _ = proc.communicate(stdin_data, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc, signal)
            raise UserError(f"{what}: no answer within {timeout_s:g} s (TIMEOUT)") from None
        except BaseException:
            _kill(proc, signal)
            raise
        err.seek(0)
        text = err.read()
        log.write(text)
    lines = [ln for ln in text.decode(errors="replace").splitlines() if ln.strip()]
    return Finished(proc.returncode, out.decode(errors="replace"), " | ".join(lines[-3:])[:500])


def _communicate_open(proc, timeout_s: float):
    """stdout read to its end while stdin stays open (closed after, so the child's stdin watch fires only when the
    host stops or the connection drops)."""
    import subprocess

    try:
        out = proc.stdout.read() if timeout_s is None else _read_with_timeout(proc, timeout_s)
    finally:
        proc.stdin.close()
    proc.wait()
    if out is None:
        raise subprocess.TimeoutExpired(proc.args, timeout_s)
    return out, None


def _read_with_timeout(proc, timeout_s: float) -> bytes | None:
    import threading

    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return None if reader.is_alive() else b"".join(chunks)


def _kill(proc, signal) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
