"""The process that runs on a device: ``python -m mobilize.devices.child DIR check|time|facts [--watch-stdin]``.

The wire format is the arm64 child's (:mod:`mobilize.arm64.child`): DIR holds ``request.json`` and ``inputs.npz``
and the files; arrays only, never pickles.

* ``check`` runs every file on every sample (the arm64 child's own code) and writes ``outputs.npz`` and
  ``machine.json``, with the device's facts beside the runtimes' versions;
* ``time`` opens every file once and times them in interleaved rounds with the schedule compare's host rounds use
  (:func:`mobilize.bench.rounds.schedule`: a warm-up, then the order rotating each round), on the first sample; each
  round is printed as one JSON line when it ends (so a connection that drops mid-run keeps the rounds that
  finished), with the board's temperature, clock and load before and after it, and a last line with the machine's
  load over the rounds (:class:`mobilize.bench.load.LoadWatch`);
* ``facts`` prints the device's facts (``mobilize devices check``).

``--watch-stdin``: exit as soon as stdin closes.  Over SSH the child's stdin is the connection: when it drops, or
the host stops the run (Ctrl-C), sshd closes it and the child ends instead of running on, unwatched, on the board.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

THERMAL = Path("/sys/class/thermal")
CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq")
MODULES = ("numpy", "torch", "executorch", "onnxruntime", "ai_edge_litert", "openvino", "llama_cpp",
           "onnxruntime_genai")
"""What ``facts`` looks for on the device: the arrays, torch (the child's tensors) and each engine's runtime."""
ARM_PARTS = {0xd03: "Cortex-A53", 0xd04: "Cortex-A35", 0xd05: "Cortex-A55", 0xd07: "Cortex-A57", 0xd08: "Cortex-A72",
             0xd09: "Cortex-A73", 0xd0a: "Cortex-A75", 0xd0b: "Cortex-A76", 0xd0c: "Neoverse-N1", 0xd0d: "Cortex-A77",
             0xd40: "Neoverse-V1", 0xd41: "Cortex-A78", 0xd42: "Cortex-A78AE", 0xd44: "Cortex-X1", 0xd46: "Cortex-A510",
             0xd47: "Cortex-A710", 0xd48: "Cortex-X2", 0xd49: "Neoverse-N2", 0xd4b: "Cortex-A78C", 0xd4f: "Neoverse-V2"}
"""Arm's own cores by the part number /proc/cpuinfo gives (``CPU part``, implementer 0x41): an arm64 kernel names
no model (Raspberry Pi 5: Cortex-A76; Jetson Orin: Cortex-A78AE; i.MX 8M Plus: Cortex-A53)."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def temperature_c() -> float | None:
    """The hottest thermal zone the board exposes (most SoCs: the CPU's), in degrees C; None where none is readable."""
    temps = []
    for zone in THERMAL.glob("thermal_zone*"):
        text = _read(zone / "temp")
        if text and text.lstrip("-").isdigit():
            temps.append(int(text) / 1000.0)
    return max(temps) if temps else None


def clock_mhz() -> tuple[float | None, float | None]:
    """cpu0's current and maximum clock (cpufreq), MHz; None where the kernel does not expose them (most VMs)."""
    cur, top = _read(CPUFREQ / "scaling_cur_freq"), _read(CPUFREQ / "cpuinfo_max_freq")
    return (int(cur) / 1000.0 if cur and cur.isdigit() else None, int(top) / 1000.0 if top and top.isdigit() else None)


def sensors() -> dict[str, Any]:
    """Temperature, clock and load average now: read before and after each timed round."""
    cur, top = clock_mhz()
    return {"temp_c": temperature_c(), "clock_mhz": cur, "clock_max_mhz": top, "load1": os.getloadavg()[0]}


def _os_name() -> str:
    for line in (_read(Path("/etc/os-release")) or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.partition("=")[2].strip('"')
    return platform.platform()


def _memory_mb() -> float | None:
    for line in (_read(Path("/proc/meminfo")) or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024.0
    return None


def arm_core(cpuinfo: str) -> str | None:
    r"""The Arm core /proc/cpuinfo's part numbers name (the first; several kinds joined), or None.

        >>> arm_core("CPU implementer\t: 0x41\nCPU part\t: 0xd0b\n")
        'Cortex-A76'
    """
    if "CPU implementer\t: 0x41" not in cpuinfo and "CPU implementer: 0x41" not in cpuinfo:
        return None
    parts = []
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "CPU part":
            name = ARM_PARTS.get(int(value.strip(), 16), f"Arm part {value.strip()}")
            if name not in parts:
                parts.append(name)
    return " + ".join(parts) or None


def emulated_reason(machine: str, cpuinfo: str) -> str | None:
    r"""Why this machine's times are not a CPU's latency: QEMU user emulation, or a reported CPU of another
    architecture than the one the process runs on; None on a real CPU.

        >>> emulated_reason("aarch64", "processor : 0\nvendor_id : AuthenticAMD\nflags : fpu sse avx2")
        'the process runs on aarch64 but the CPU reports x86 (vendor_id): an emulator'
        >>> emulated_reason("x86_64", "vendor_id : GenuineIntel") is None
        True
    """
    if os.environ.get("QEMU_CPU"):
        return f"QEMU user emulation of {os.environ['QEMU_CPU']}"
    x86 = "vendor_id" in cpuinfo
    arm = "CPU implementer" in cpuinfo
    if machine in ("aarch64", "arm64", "armv7l") and x86 and not arm:
        return f"the process runs on {machine} but the CPU reports x86 (vendor_id): an emulator"
    if machine in ("x86_64", "AMD64", "i686") and arm and not x86:
        return f"the process runs on {machine} but the CPU reports arm (CPU implementer): an emulator"
    return None


def facts(cache: str | None = None) -> dict[str, Any]:
    """What the device is: architecture, CPU (model, cores, the instruction sets that decide kernels), memory, OS,
    Python, free disk where the cache is, governor and clock, temperature, load, and which runtimes import."""
    from mobilize.core.packages import installed
    from mobilize.core.target import host_cpu

    cpu = host_cpu()
    cpuinfo = _read(Path("/proc/cpuinfo")) or ""
    if cpu.model in ("", cpu.arch, platform.machine()) and arm_core(cpuinfo):
        cpu = dataclasses.replace(cpu, model=arm_core(cpuinfo))
    cur, top = clock_mhz()
    free = shutil.disk_usage(cache).free / 2**20 if cache and os.path.isdir(cache) else None
    return {"machine": platform.machine(), "cpu": cpu.to_json(), "cores": os.cpu_count(), "memory_mb": _memory_mb(),
            "os": _os_name(), "python": platform.python_version(), "free_disk_mb": free,
            "governor": _read(CPUFREQ / "scaling_governor"), "clock_mhz": cur, "clock_max_mhz": top,
            "temp_c": temperature_c(), "loadavg": list(os.getloadavg()),
            "emulated": emulated_reason(platform.machine(), cpuinfo),
            "modules": {m: installed(m) for m in MODULES}}


def check(folder: Path) -> dict[str, Any]:
    from mobilize.arm64 import child

    report = child.run(folder)  # every file on every sample; outputs.npz written
    return {**report, "facts": facts(str(folder))}


def time_files(folder: Path) -> dict[str, Any]:
    """Every file of the request opened once, then timed in interleaved rounds (the host's schedule); a file that
    does not load records its error and the others go on."""
    import numpy as np
    import torch

    from mobilize.arm64.child import set_quantized_engine
    from mobilize.bench.load import LoadWatch
    from mobilize.bench.rounds import schedule
    from mobilize.core.artifact import Artifact
    from mobilize.core.errors import UserError
    from mobilize.runtimes.base import open_session

    request = json.loads((folder / "request.json").read_text())
    timing = request["timing"]
    torch.set_num_threads(request["threads"])
    set_quantized_engine()
    with np.load(folder / "inputs.npz") as z:
        x = [torch.from_numpy(z[f"s0_{j}"].copy()) for j in range(request["inputs"])]
    with contextlib.ExitStack() as stack:
        sessions, errors = {}, {}
        for k, job in enumerate(request["files"]):
            try:
                sessions[str(k)] = stack.enter_context(open_session(
                    Artifact.from_file(folder / job["artifact"]), job.get("runtime"), threads=request["threads"]))
            except UserError as exc:
                errors[str(k)] = str(exc)[:300]
        medians: dict[str, list[float]] = {n: [] for n in sessions}
        before = [sensors()]

        def after_round(i: int) -> None:
            after = sensors()
            _say({"round": i, "before": before[0], "after": after,
                  "medians_ms": {n: m[-1] for n, m in medians.items() if len(m) > i}})
            before[0] = after

        watch = LoadWatch.start()
        warmup = timing.get("warmup", 3)
        got = schedule(list(sessions), _timer(sessions, x, medians, warmup > 0), timing["rounds"],
                       timing["iterations"], warmup=warmup, after_round=after_round)
        load = watch.stop()
    return {"files": {n: {"times_ns": rt.times_ns, "total_ns": rt.total_ns, "round_medians_ms": rt.round_medians_ms}
                      for n, rt in got.items()}, "errors": errors, "load": load.to_json() if load else None}


def _timer(sessions: dict[str, Any], x: list[Any], medians: dict[str, list[float]], warms: bool):
    """``schedule``'s round: ``n`` calls of one file, each timed; the medians of its rounds after the warm-up
    (``warms``: ``schedule`` calls each file once first, untimed) kept in ``medians`` for the rounds' JSON lines."""
    import statistics

    warmed: set[str] = set() if warms else set(sessions)

    def run_round(name: str, n: int):
        session, times = sessions[name], []
        t0 = time.perf_counter_ns()
        for _ in range(n):
            t = time.perf_counter_ns()
            session.run(x)
            times.append(time.perf_counter_ns() - t)
        total = time.perf_counter_ns() - t0
        if name in warmed:
            medians[name].append(statistics.median(times) / 1e6)
        warmed.add(name)
        return times, total
    return run_round


def _say(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line, allow_nan=False) + "\n")
    sys.stdout.flush()


def _watch_stdin() -> None:
    """End this process when stdin closes (the SSH connection dropped, or the host stopped the run)."""
    def watch() -> None:
        try:
            while os.read(0, 4096):  # the raw descriptor: no lock the interpreter's shutdown could wait on
                pass
        finally:
            os._exit(75)
    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str]) -> int:
    folder, phase = Path(argv[0]), argv[1]
    if "--watch-stdin" in argv:
        _watch_stdin()
    if phase == "facts":
        _say({"facts": facts(str(folder))})
        return 0
    result = check(folder) if phase == "check" else time_files(folder)
    tmp = folder / f"{phase}.tmp.json"
    tmp.write_text(json.dumps(result, allow_nan=False))
    os.replace(tmp, folder / ("machine.json" if phase == "check" else "timing.json"))
    _say({"done": phase})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
