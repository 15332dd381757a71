"""Run one artifact on samples in a child process: inside the arm64 root under QEMU user emulation, or
on the host (the same child, for the outputs the arm64 ones are compared with).

The arm64 root is what ``scripts/setup-arm64.sh`` builds (``$MOBILIZE_ARM64_ROOT``, default
``~/.cache/mobilize/arm64``).  The child runs in a private mount namespace (``unshare``): /proc mounted,
this checkout's ``src/`` bind-mounted read-only at /opt/mobilize/src, no /sys (onnxruntime's cpuinfo
segfaults under QEMU when it is there), so nothing stays mounted and two runs do not meet.  Inputs and
outputs cross as .npz files in a folder under the root's /tmp.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from mobilize.core.errors import BackendUnavailableError, UserError

CPU_MODELS = {
    "cortex-a76": "Armv8.2-A: fp16 arithmetic and dotprod, no i8mm (Raspberry Pi 5; phones' big cores 2019-2022)",
    "cortex-a72": "Armv8.0-A: no fp16 arithmetic, no dotprod (Raspberry Pi 4)",
    "cortex-a53": "Armv8.0-A in-order: no fp16 arithmetic, no dotprod (cheap boards, phones' little cores)",
    "neoverse-n1": "Armv8.2-A server core: fp16 arithmetic and dotprod (AWS Graviton2)",
    "max": "every feature QEMU emulates: fp16, dotprod, i8mm, bf16, SVE2 (Armv9-era phones)",
}
"""QEMU CPU models offered (``QEMU_CPU``): the features decide which kernels XNNPACK, MLAS and qnnpack pick."""
DEFAULT_CPU = "cortex-a76"
MIDR = {"cortex-a76": (0x41, 4, 0xd0b, 1), "cortex-a72": (0x41, 0, 0xd08, 3), "cortex-a53": (0x41, 0, 0xd03, 4),
        "neoverse-n1": (0x41, 3, 0xd0c, 1), "max": (0x41, 0, 0xd4f, 0)}
"""(implementer, variant, part, revision) each model reports in MIDR_EL1; ``max`` has no part of its own in QEMU
and is described as a Neoverse V2 (Armv9: fp16, dotprod, i8mm, bf16, SVE2)."""
FEATURES = {"cortex-a76": "fp asimd aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp",
            "cortex-a72": "fp asimd aes pmull sha1 sha2 crc32 cpuid",
            "cortex-a53": "fp asimd aes pmull sha1 sha2 crc32 cpuid",
            "neoverse-n1": "fp asimd aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp",
            "max": "fp asimd aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp sve "
                   "i8mm bf16 sve2"}
SETUP = "sudo bash scripts/setup-arm64.sh"
BINFMT = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")


def root_dir() -> Path:
    from mobilize.core.paths import arm64_root

    return arm64_root()


def missing() -> str | None:
    """Why an arm64 run cannot start here (one sentence), or None when it can."""
    rootfs = root_dir() / "rootfs"
    if not (rootfs / ".mobilize-debootstrap").exists() or not (rootfs / "opt/mobilize/site/.mobilize-pins").exists():
        return f"no arm64 root at {root_dir()} (set MOBILIZE_ARM64_ROOT, or build it with `{SETUP}`)"
    if os.geteuid() != 0:
        return "running in the arm64 root needs root (chroot and a private mount namespace)"
    if not BINFMT.exists() or "enabled" not in BINFMT.read_text():
        return f"qemu-aarch64 is not registered in binfmt_misc (after a reboot: `{SETUP}` registers it again)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is missing"
    return None


def check_cpu(cpu: str) -> str:
    if cpu not in CPU_MODELS:
        from mobilize.core.registry import did_you_mean

        raise UserError(f"unknown arm64 CPU model '{cpu}'; {did_you_mean(cpu, list(CPU_MODELS))}")
    return cpu


@dataclasses.dataclass
class ChildRun:
    """What one child run gave back for one file: its outputs (per sample, per output) or its error, and what
    it ran on."""

    outputs: list[list[Any]] | None
    machine: dict[str, Any]
    error: str | None = None


def run_child(artifact: str | os.PathLike, samples: Sequence[Sequence[Any]], *, on: str, runtime: str | None = None,
              cpu: str = DEFAULT_CPU, threads: int = 1, timeout_s: float = 900.0, log_path: str | None = None
              ) -> ChildRun:
    """Run ``artifact`` on ``samples`` (lists of tensors, batch of one) in a child on ``on`` ("arm64" or "host");
    a file the runtime cannot load or run is a UserError."""
    [run] = run_children([(artifact, runtime)], samples, on=on, cpu=cpu, threads=threads, timeout_s=timeout_s,
                         log_path=log_path)
    if run.error:
        raise UserError(f"{Path(artifact).name} on {on}: {run.error}")
    return run


def run_children(files: Sequence[tuple[str | os.PathLike, str | None]], samples: Sequence[Sequence[Any]], *,
                 on: str, cpu: str = DEFAULT_CPU, threads: int = 1, timeout_s: float = 900.0,
                 log_path: str | None = None) -> list[ChildRun]:
    """Every (file, runtime) on the same ``samples`` in one child on ``on`` ("arm64" or "host"): the runtimes
    import once.  A crash or timeout of the child is a UserError naming the files."""
    import numpy as np
    import torch

    if on == "arm64":
        why = missing()
        if why:
            raise BackendUnavailableError(f"cannot verify on arm64: {why}")
        base = root_dir() / "rootfs" / "tmp"
    else:
        base = None
    folder = Path(tempfile.mkdtemp(prefix="mobilize-arm64-", dir=base))
    try:
        names = []
        for k, (artifact, _) in enumerate(files):
            src = Path(artifact)
            names.append(f"{k}-{src.name}")
            shutil.copy2(src, folder / names[-1])
            manifest = src.with_name(src.name + ".manifest.json")
            if manifest.exists():
                shutil.copy2(manifest, folder / (names[-1] + ".manifest.json"))
        arrays = {f"s{i}_{j}": torch.as_tensor(t).detach().contiguous().numpy() for i, x in enumerate(samples)
                  for j, t in enumerate(x)}
        np.savez(folder / "inputs.npz", **arrays)
        (folder / "request.json").write_text(json.dumps({
            "files": [{"artifact": n, "runtime": r} for n, (_, r) in zip(names, files)], "threads": threads,
            "samples": len(samples), "inputs": len(samples[0]) if samples else 0}, allow_nan=False))
        command, env = child_command(folder, on, cpu)
        what = ", ".join(Path(a).name for a, _ in files)
        _run(command, env, timeout_s, log_path, on, what)
        report = json.loads((folder / "machine.json").read_text())
        machine = {k: v for k, v in report.items() if k != "files"}
        runs = []
        with np.load(folder / "outputs.npz") as z:
            for k, job in enumerate(report["files"]):
                if "error" in job:
                    runs.append(ChildRun(None, machine, job["error"]))
                    continue
                outs = [[torch.from_numpy(z[f"f{k}_s{i}_{j}"].copy()) for j in range(job["outputs"])]
                        for i in range(len(samples))]
                runs.append(ChildRun(outs, {**machine, **job}))
        return runs
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def child_command(folder: Path, on: str, cpu: str, module: str = "mobilize.arm64.child"
             ) -> tuple[list[str], dict[str, str]]:
    import mobilize

    src = Path(mobilize.__file__).resolve().parent.parent  # the checkout's src/ (or site-packages)
    if on == "host":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
        return [sys.executable, "-m", module, str(folder)], env
    rootfs = root_dir() / "rootfs"
    inside = "/" + str(folder.relative_to(rootfs))
    describe_cpu(folder / "cpu", cpu)
    # /proc, the emulated CPU's /proc/cpuinfo and /sys/devices/system/cpu, and the checkout's mobilize package
    # (read-only), then chroot; all in this mount namespace only
    script = ('mount -t proc proc "$0/proc" && mount --bind "$2/cpuinfo" "$0/proc/cpuinfo" && '
              'mount --bind "$2/sys" "$0/sys" && mkdir -p "$0/opt/mobilize/src/mobilize" && '
              'mount --bind -o ro "$1" "$0/opt/mobilize/src/mobilize" && shift 2 && exec chroot "$0" "$@"')
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "QEMU_CPU": cpu}
    return (["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, str(rootfs),
             str(src / "mobilize"), str(folder / "cpu"), "/usr/bin/env", "-i", f"QEMU_CPU={cpu}", "HOME=/tmp", "PYTHONNOUSERSITE=1",
             "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=/opt/mobilize/src:/opt/mobilize/site",
             "/usr/bin/python3", "-m", module, inside], env)


def describe_cpu(where: Path, cpu: str) -> None:
    """/proc/cpuinfo and /sys/devices/system/cpu for one core of the emulated model.  QEMU 7.2's user mode
    passes the host's x86 files through: cpuinfo (inside XNNPACK, ONNX Runtime, PyTorch) then fails to
    initialise and XNNPACK refuses to start (status 5, unsupported hardware); with the host's real /sys,
    onnxruntime segfaults.  These say what QEMU emulates; the features themselves come from AT_HWCAP."""
    implementer, variant, part, revision = MIDR[cpu]
    midr = implementer << 24 | variant << 20 | 0xF << 16 | part << 4 | revision
    (where / "sys/devices/system/cpu/cpu0/regs/identification").mkdir(parents=True)
    for name in ("possible", "present", "online"):
        (where / "sys/devices/system/cpu" / name).write_text("0\n")
    (where / "sys/devices/system/cpu/cpu0/regs/identification/midr_el1").write_text(f"0x{midr:016x}\n")
    (where / "cpuinfo").write_text(
        f"processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: {FEATURES[cpu]}\nCPU implementer\t: 0x{implementer:02x}\n"
        f"CPU architecture: 8\nCPU variant\t: 0x{variant:x}\nCPU part\t: 0x{part:03x}\nCPU revision\t: {revision}\n\n")


def _run(command: list[str], env: dict[str, str], timeout_s: float, log_path: str | None, on: str,
         what: str) -> None:
    log = open(log_path, "ab") if log_path else subprocess.PIPE
    try:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT if log_path else log,
                                start_new_session=True)  # its own group: a timeout kills QEMU and all it started
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise UserError(f"{what} on {on}: no answer within {timeout_s:g} s (TIMEOUT; emulation "
                            f"runs 10-100x slower than the host)") from None
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    finally:
        if log_path:
            log.close()
    if proc.returncode != 0:
        tail = Path(log_path).read_text(errors="replace") if log_path else (out or b"").decode(errors="replace")
        lines = [ln for ln in tail.splitlines() if ln.strip()]
        how = (f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
               else f"exited with code {proc.returncode}")
        raise UserError(f"{what} on {on}: the child {how}: {' | '.join(lines[-3:])[:500]}")
