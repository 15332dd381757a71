"""The on-device half of the NNAPI target: the adb script, and reading its logs back.

:func:`write_adb_script` writes ``nnapi_benchmark.sh`` next to the artifacts: for every NNAPI file
in the folder and its CPU twin, the exact ``adb push`` and ``speed_benchmark_torch`` commands of
the PyTorch NNAPI tutorial (``--pthreadpool_size=1 --use_bundled_input=0 --warmup=5 --iter=200``,
plus ``--report_pep=true`` so every iteration's time is in the log), the ``adb pull`` of each log,
and the ``mobilize bench --from-log`` that turns it into the same JSON ``mobilize bench`` writes.

:func:`report_from_log` reads one ``speed_benchmark_torch`` run (``Starting benchmark.`` ...
``Main run finished. Microseconds per iter: X. Iters per second: Y`` and, with ``--report_pep``,
one ``PyTorchObserver`` line per iteration).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path
from typing import Any

from mobilize.core.artifact import atomic_write_text
from mobilize.core.errors import ConfigError
from mobilize.backends.nnapi.nnapi_format import DEPRECATION, is_nnapi_archive, nnapi_twin_path

SCRIPT_NAME = "nnapi_benchmark.sh"
BENCH_FLAGS = ("--pthreadpool_size=1", "--use_bundled_input=0", "--warmup=5", "--iter=200", "--report_pep=true")
"""The tutorial's on-device benchmark flags, plus per-iteration times for full statistics."""

_NUMBER = r"([-+0-9.eE]+|inf|nan)"
_MAIN = re.compile(rf"Main run finished\. Microseconds per iter: {_NUMBER}\. Iters per second: {_NUMBER}")
_PEP = re.compile(r"PyTorchObserver (\{.*\})")
_STEPS = ("Starting benchmark.", "Running warmup runs.", "Main runs.")


def nnapi_files(folder: Path) -> list[tuple[Path, Path | None]]:
    """Every NNAPI file in ``folder`` (by its archive) with its CPU twin, when there is one."""
    pairs = []
    for path in sorted(folder.glob("*.pt*")):
        if path.suffix in (".pt", ".ptl") and is_nnapi_archive(path):
            twin = nnapi_twin_path(path)
            pairs.append((path, twin if twin.exists() and twin != path else None))
    return pairs


def adb_script(pairs: list[tuple[Path, Path | None]]) -> str:
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        "# On-device benchmark of the NNAPI models and their CPU twins (written by mobilize).",
        "# Needs adb, a phone with USB debugging on, and speed_benchmark_torch built for Android with NNAPI",
        "# (https://pytorch.org/tutorials/recipes/mobile_perf.html#android-benchmarking-setup); set",
        "# SPEED_BENCHMARK_TORCH to that binary on this machine.  Logs come back to device-logs/, and",
        "# `mobilize bench --from-log` turns each into the JSON `mobilize bench` writes.",
        *(f"# {part.strip()}." for part in DEPRECATION.split(". ")),
        "set -u",
        'cd "$(dirname "$0")" || exit 1',
        'BIN="${SPEED_BENCHMARK_TORCH:-./speed_benchmark_torch}"',
        'DIR="${DEVICE_DIR:-/data/local/tmp/mobilize}"',
        'MOBILIZE="${MOBILIZE:-mobilize}"',
        "mkdir -p device-logs",
        'adb shell mkdir -p "$DIR" || exit 1',
        'adb push "$BIN" "$DIR/speed_benchmark_torch" || exit 1',
        'adb shell chmod 755 "$DIR/speed_benchmark_torch" || exit 1',
    ]
    flags = " ".join(BENCH_FLAGS)
    for nnapi, twin in pairs:
        for path in (nnapi, twin):
            if path is None:
                continue
            name, log = path.name, path.name + ".log"
            lines += [
                "",
                f"# {name} ({'NNAPI' if path == nnapi else 'CPU twin of ' + nnapi.name})",
                f"adb push {q(name)} \"$DIR/\" || exit 1",
                f"adb shell \"cd $DIR && ./speed_benchmark_torch --model={q(name)} {flags} > {q(log)} 2>&1\" "
                f"|| echo \"speed_benchmark_torch failed on {name}: see device-logs/{log}\"",
                f"adb pull \"$DIR/{log}\" device-logs/{q(log)}",
                f"\"$MOBILIZE\" bench --from-log device-logs/{q(log)} --model {q(name)} --pthreadpool_size 1 "
                f"--use_bundled_input 0 --warmup 5 --iter 200 --json device-logs/{q(path.name + '.bench.json')}",
            ]
        if twin is None:
            lines += [f"# no CPU twin found for {nnapi.name} (expected {nnapi_twin_path(nnapi).name})"]
    return "\n".join(lines) + "\n"


def write_adb_script(folder: Path) -> Path:
    """(Re)write ``nnapi_benchmark.sh`` in ``folder`` for every NNAPI file there; executable."""
    path = folder / SCRIPT_NAME
    atomic_write_text(path, adb_script(nnapi_files(folder)))
    path.chmod(path.stat().st_mode | 0o111)
    return path


# -- reading a device log back ----------------------------------------------------------------------------

def parse_log(text: str, where: str = "the log") -> tuple[float, float, list[float]]:
    """(microseconds per iter, iters per second, per-iteration microseconds) of the one run in ``text``."""
    numbered = [(n, ln.strip()) for n, ln in enumerate(text.replace("\r", "").splitlines(), 1) if ln.strip()]
    lines = [ln for _, ln in numbered]
    mains = [(n, m) for n, m in ((n, _MAIN.search(ln)) for n, ln in numbered) if m]
    if not mains:
        last = lines[-1] if lines else "it is empty"
        raise ConfigError(f"{where} has no 'Main run finished. Microseconds per iter: ...' line: not a complete "
                          f"speed_benchmark_torch run (last line: {last[:160]})",
                          hint="run speed_benchmark_torch to the end and pull its whole output")
    if len(mains) > 1:
        raise ConfigError(f"{where} holds {len(mains)} benchmark runs", hint="give one run per log file")
    missing = [s for s in _STEPS if s not in lines]
    if missing:
        raise ConfigError(f"{where} lacks speed_benchmark_torch's '{missing[0]}' line: not its output",
                          hint="pass the log of one speed_benchmark_torch run")
    pep = []
    for n, line in numbered:
        match = _PEP.search(line) if "PyTorchObserver" in line else None
        if "PyTorchObserver" in line and match is None:
            raise ConfigError(f"{where} line {n}: a PyTorchObserver line without a {{...}} record: {line[:160]}")
        if match:
            record = _pep_record(match.group(1), f"{where} line {n}")
            if record.get("metric") == "latency" and record.get("type") == "NET":
                scale = {"us": 1.0, "ms": 1e3, "ns": 1e-3}.get(record.get("unit", "us"))
                if scale is None:
                    raise ConfigError(f"{where} line {n}: PyTorchObserver latency in unknown unit "
                                      f"'{record.get('unit')}'")
                pep.append(_time(record.get("value"), f"{where} line {n}: PyTorchObserver latency") * scale)
    n, main = mains[0]
    us = _time(main.group(1), f"{where} line {n}: Microseconds per iter", zero=False)
    per_s = _time(main.group(2), f"{where} line {n}: Iters per second", zero=False)
    return us, per_s, pep


def _pep_record(text: str, where: str) -> dict[str, Any]:
    """The ``{...}`` of a PyTorchObserver line (a JSON text starting with ``{`` that parses is an object)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: the PyTorchObserver record is not JSON ({exc.msg}): {text[:160]}") from None


def _time(value: Any, what: str, zero: bool = True) -> float:
    """A time or rate from the log: a finite number, not negative (and more than 0 unless ``zero``)."""
    try:
        number = float(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or not math.isfinite(number) or number < 0 or (number == 0 and not zero):
        raise ConfigError(f"{what} is {json.dumps(value)}: not a {'' if zero else 'positive '}finite number",
                          hint="pass the unedited output of one speed_benchmark_torch run")
    return number


def report_from_log(log: str | Path, *, model: str | None, threads: int | None, warmup: int, iterations: int,
                    bundled_input: int | None) -> dict[str, Any]:
    """The fields of the bench report (:class:`mobilize.report.bench_report.BenchReport`, which ``bench --from-log``
    writes) for one device run; what the log does not say is None, with a note."""
    from mobilize.core.artifact import Artifact
    from mobilize.bench.stats import BenchStats

    log = Path(log)
    if not log.is_file():
        raise ConfigError(f"log file not found: {log}")
    us, per_s, pep = parse_log(log.read_text(errors="replace"), str(log))
    notes = ["figures parsed from a device log (speed_benchmark_torch); it does not record load time, first "
             "run or peak memory", f"warm-up runs as given on the command line ({warmup}): the log does not say"]
    if pep:
        if iterations and len(pep) != iterations:
            notes.append(f"the log has {len(pep)} per-iteration times; --iter said {iterations}: used the log's")
        stats = BenchStats.from_times_ns([t * 1e3 for t in pep], total_ns=us * 1e3 * len(pep)).to_json()
    else:
        notes.append("no per-iteration times in the log (run speed_benchmark_torch with --report_pep=true): only "
                     "the mean is known")
        stats = {"iterations": iterations, "latency_ms_mean": us / 1e3, "iters_per_s": per_s, "us_per_iter": us,
                 **{f"latency_ms_{k}": None for k in ("p10", "p50", "p90", "p99", "min", "max", "std")}}
    fmt, size = None, None
    if model and Path(model).is_file():
        art = Artifact.from_file(model)
        fmt, size = str(art.format), art.size_bytes
    return dict(
        model=model or str(log), format=fmt, runtime="speed_benchmark_torch (device)", threads=threads, warmup=warmup,
        iterations=stats["iterations"], size_bytes=size,
        input_source=f"bundled:{bundled_input}" if bundled_input is not None else "as given on the device",
        input_specs=[], notes=notes, stats=stats,
        sections={"log": str(log), "speed_benchmark_torch": {"us_per_iter": us, "iters_per_s": per_s}})


def format_report(r: dict[str, Any]) -> str:
    def ms(key: str) -> str:
        return "?" if r.get(key) is None else f"{r[key]:.3f}"

    lines = [f"Device run: {r['model']} ({r['format'] or 'format unknown'}, {r['runtime']}, "
             f"{r['threads'] or '?'} thread(s), {r['iterations']} iterations, input {r['input_source']})",
             f"  Main run finished. Microseconds per iter: {r['speed_benchmark_torch']['us_per_iter']:g}. "
             f"Iters per second: {r['speed_benchmark_torch']['iters_per_s']:g}",
             f"  latency ms   mean {ms('latency_ms_mean')}  p50 {ms('latency_ms_p50')}  p90 {ms('latency_ms_p90')}"
             f"  p99 {ms('latency_ms_p99')}  min {ms('latency_ms_min')}  max {ms('latency_ms_max')}"]
    return "\n".join(lines + [f"  note: {n}" for n in r["notes"]])
