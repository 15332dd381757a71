"""``compare --on DEVICE``: the files built and checked on the host, then checked and timed on each device.

For each device every variant with a file runs there twice, each time in one child for all files: a check on the
first :data:`DEVICE_SAMPLES` accuracy samples, judged by the verify core with the run's Policy against the float
reference the host computed (so a verdict is the device's own kernels' verdict), then timed rounds with the host's
schedule (a warm-up, the order rotating each round) on the first sample.  A device gets its own section in
report.json (``devices``: its facts, each variant's outcome, verdict and times, the rounds' sensor readings, what
was pushed) and its own pick, made by the host's rule (:func:`mobilize.compare.recommend.recommend`) on its own
rounds.  An emulated device (QEMU) is checked, never timed: its wall times are an emulator's.  A device that stops
answering gives its remaining variants an outcome that names it; the host and the other devices go on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from mobilize.core.backend import host_only as host_only_reason
from mobilize.core.errors import UserError
from mobilize.core.outcome import Outcome
from mobilize.devices.base import Device, DeviceLost

DEVICE_SAMPLES = 64
"""Accuracy samples per file on a device (the first of compare's): a board checks in seconds, not minutes."""
LOST = "DEVICE_LOST"
"""A variant's outcome on a device that stopped answering before its check or rounds finished."""


def run_on_devices(devices: Sequence[Device], results: dict[str, Any], samples: Sequence[Sequence[Any]],
                   labels: Sequence[int] | None, reference: dict[str, Any], *, policy, rounds: int, iterations: int,
                   threads: int, timeout_s: float, unit: str, log_dir=None,
                   status: Callable[[str], None] = lambda text: None) -> dict[str, Any]:
    """Each device's section (name -> JSON), in the order given."""
    out = {}
    for device in devices:
        status(f"{device.name}: checking the files on the device")
        try:
            out[device.name] = _one_device(device, results, samples, labels, reference, policy=policy, rounds=rounds,
                                           iterations=iterations, threads=threads, timeout_s=timeout_s, unit=unit,
                                           log_dir=log_dir, status=status)
        finally:
            device.close()
    return out


def _one_device(device: Device, results, samples, labels, reference, *, policy, rounds, iterations, threads,
                timeout_s, unit, log_dir, status) -> dict[str, Any]:
    n = min(DEVICE_SAMPLES, len(samples))
    xs, ys = list(samples[:n]), (list(labels[:n]) if labels is not None else None)
    rows: dict[str, dict[str, Any]] = {}
    todo = []
    for r in results.values():
        why = _skip_reason(r)
        if why:
            rows[r.name] = {"outcome": Outcome.UNSUPPORTED.value, "reason": why}
        else:
            todo.append(r)
    log = str(log_dir / f"device-{device.name}.log") if log_dir else None
    section: dict[str, Any] = {"device": device.describe(), "emulated": device.emulated, "samples": n,
                               "variants": rows}
    if todo:
        section.update(_check_and_time(device, todo, xs, ys, reference, rows, policy=policy, rounds=rounds,
                                       iterations=iterations, threads=threads, timeout_s=timeout_s, log=log,
                                       status=status))
    section["pushed"] = dict(device.pushed)
    section["recommended"] = _pick(section, results, unit)
    return section


def _check_and_time(device, todo, xs, ys, reference, rows, *, policy, rounds, iterations, threads, timeout_s, log,
                    status) -> dict[str, Any]:
    from mobilize.arm64.verdict import judge_outputs

    files = [(r.artifact, r.runtime) for r in todo]
    try:
        machine, checks = device.check(files, xs, threads=threads, timeout_s=timeout_s * len(todo), log_path=log)
    except UserError as exc:
        outcome = LOST if isinstance(exc, DeviceLost) else Outcome.RUN_FAIL.value
        for r in todo:
            rows[r.name] = {"outcome": outcome, "reason": f"the check on {device.name} did not finish: {exc}"}
        return {"facts": None, "failure": str(exc)}
    ref_outs, names = reference["outputs"][:len(xs)], reference.get("names")
    timed = []
    for r, got in zip(todo, checks):
        if got.error:
            rows[r.name] = {"outcome": Outcome.RUN_FAIL.value, "reason": got.error}
            continue
        verdict = judge_outputs(got.outputs, ref_outs, ys, r.kind, policy, names).to_json()
        rows[r.name] = {"outcome": verdict["outcome"], "verdict": verdict, "runtime": got.runtime,
                        "host_outcome": r.outcome.value if hasattr(r.outcome, "value") else r.outcome}
        timed.append(r)
    facts = machine.get("facts") or {}
    emulated = device.emulated or facts.get("emulated")  # a QEMU root behind an SSH login says so itself
    section = {"facts": facts, "versions": machine.get("versions"), "emulated": emulated,
               "cpu_features": machine.get("cpu_features"), "qemu_cpu": machine.get("qemu_cpu")}
    if emulated:
        for r in timed:
            rows[r.name]["timing"] = f"not timed: {emulated}"
        return section
    if timed:
        status(f"{device.name}: timed rounds ({len(timed)} files, {rounds} rounds)")
        section.update(_time(device, timed, xs[0], rows, rounds=rounds, iterations=iterations, threads=threads,
                             timeout_s=timeout_s, log=log))
    return section


def _time(device, timed, sample, rows, *, rounds, iterations, threads, timeout_s, log) -> dict[str, Any]:
    from mobilize.bench.rounds import RoundTimes

    files = [(r.artifact, r.runtime) for r in timed]
    try:
        got = device.time(files, sample, rounds=rounds, iterations=iterations, threads=threads,
                          timeout_s=timeout_s * (rounds + 1), log_path=log)
    except UserError as exc:
        for r in timed:
            rows[r.name].update(outcome=Outcome.RUN_FAIL.value, reason=f"the timed rounds on {device.name} failed: "
                                                                        f"{exc}")
        return {"rounds": [], "failure": str(exc)}
    for k, r in enumerate(timed):
        row = rows[r.name]
        if k in got.errors:
            row.update(outcome=Outcome.LOAD_FAIL.value, reason=got.errors[k])
            continue
        figures = got.files.get(k)
        if got.lost:
            row.update(outcome=LOST, reason=f"the connection to {device.name} was lost during the timed rounds "
                                            f"({len((figures or {}).get('round_medians_ms', []))} of {rounds} "
                                            f"rounds done): {got.lost}")
            continue
        rt = RoundTimes(figures["times_ns"], figures["total_ns"], figures["round_medians_ms"])
        row["latency"] = rt.stats().to_json()
        row["latency_ms_round_medians"] = rt.round_medians_ms
    return {"rounds": [_round_flags(ln) for ln in got.rounds], "machine_load": got.load, "failure": got.lost}


def _round_flags(line: dict[str, Any]) -> dict[str, Any]:
    """A round's sensor line with what it says: throttling (the clock under 85% of its maximum, or hotter than
    85 C), a busy board (load average over its cores is not known here: the load over the rounds is)."""
    after = line.get("after") or {}
    clock, top, temp = after.get("clock_mhz"), after.get("clock_max_mhz"), after.get("temp_c")
    throttled = bool((clock and top and clock < 0.85 * top) or (temp is not None and temp >= 85.0))
    return {**line, "throttled": throttled}


def _pick(section: dict[str, Any], results: dict[str, Any], unit: str) -> dict[str, Any] | None:
    """The device's pick, by the host's rule on the device's own rounds and verdicts."""
    if section.get("emulated") or not section.get("facts"):
        return None
    from mobilize.bench.load import MachineLoad
    from mobilize.compare.recommend import recommend
    from mobilize.core.target import CpuInfo

    copies = []
    for name, row in section["variants"].items():
        r = results[name]
        if row.get("latency_ms_round_medians"):
            copies.append(dataclasses.replace(r, outcome=Outcome(row["outcome"]), verdict=row.get("verdict"),
                                              latency=row["latency"],
                                              latency_ms_round_medians=row["latency_ms_round_medians"]))
    cpu = section["facts"]["cpu"]
    load = section.get("machine_load")
    load = MachineLoad(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in load.items()
                          if k in {f.name for f in dataclasses.fields(MachineLoad)}}) if load else None
    return recommend(copies, None, load, cpu=CpuInfo(cpu["model"], cpu["arch"], cpu["cores"], tuple(cpu["flags"])),
                     unit=unit)


def _skip_reason(r) -> str | None:
    if not r.artifact:
        return ("no file: an eager module runs in this process's PyTorch; export it (TorchScript, ExecuTorch, ONNX) "
                "to run it on a device")
    host_only = host_only_reason(r.format)
    if host_only:
        return host_only
    if r.verdict is None:
        return f"its host check did not finish ({r.outcome.value if hasattr(r.outcome, 'value') else r.outcome})"
    return None
