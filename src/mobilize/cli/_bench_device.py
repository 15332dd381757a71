"""``mobilize bench FILE --on DEVICE``: the file timed on a device over SSH (:mod:`mobilize.devices`).

The input is chosen on the host as ``bench`` chooses it (random from the file's declared shapes, ``--data``, a
bundled input), then the file and the input go to the device, where the device child opens the file once and
times ``--iter`` calls after ``--warmup`` warm-up calls (the rounds' timer of ``compare --on``), with the board's
temperature, clock and load before and after.  An emulated device's times are not a latency: refused here
(``compare --on`` checks files on one).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mobilize.core.errors import ConfigError, UserError


def bench_on_device(args: argparse.Namespace, reference: str, specs, threads: int | None) -> int:
    from mobilize.bench.stats import BenchStats
    from mobilize.cli.devices import lacking
    from mobilize.core.checks import default_threads
    from mobilize.core.artifact import atomic_write_text
    from mobilize.core.jsonfile import dumps_measured
    from mobilize.devices import resolve

    for flag, given in (("--native", args.native), ("--frames", args.frames), ("--profile", args.profile),
                        ("--report_pep", args.report_pep), ("--print_output", args.print_output)):
        if given:
            raise ConfigError(f"{flag} is not offered with --on {args.on} (a Python child times the file there)")
    if not Path(reference).is_file():
        raise ConfigError(f"--on {args.on} times a file; '{reference}' is not one",
                          hint="export it first (mobilize optimize), or compare it: mobilize compare MODEL --on "
                               f"{args.on}")
    threads = threads or default_threads()
    inputs, source = _inputs(args, reference, specs, threads)
    device = resolve(args.on)
    try:
        facts = device.probe()
        lacks = lacking(facts)
        if lacks:
            raise ConfigError(f"device {args.on} lacks {'; '.join(lacks)}",
                              hint=f"`mobilize devices check {args.on}` says what is there")
        if device.emulated or facts.get("emulated"):
            raise ConfigError(f"device {args.on} is emulated ({device.emulated or facts['emulated']}): its times are "
                              f"not a latency", hint=f"mobilize compare MODEL --on {args.on} checks files there")
        got = device.time([(reference, args.runtime)], inputs, rounds=1, iterations=args.iter, warmup=args.warmup,
                          threads=threads, timeout_s=600.0)
    finally:
        device.close()
    if got.lost or 0 in got.errors or 0 not in got.files:
        raise UserError(f"{Path(reference).name} on {args.on}: {got.lost or got.errors.get(0) or 'no times came back'}")
    times = got.files[0]
    report: dict[str, Any] = {
        "model": reference, "runtime": args.runtime, "threads": threads, "warmup": args.warmup,
        "input_source": source, **BenchStats.from_times_ns(times["times_ns"], times["total_ns"]).to_json(),
        "device": device.describe(), "facts": facts, "rounds": got.rounds, "machine_load": got.load,
        "pushed": dict(device.pushed)}
    print(format_device_stats(report))
    if args.json:
        atomic_write_text(args.json, dumps_measured(report, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def _inputs(args: argparse.Namespace, reference: str, specs, threads: int):
    """The input ``bench`` would feed the file here, chosen by opening it on the host once."""
    from mobilize.api import _choose_inputs
    from mobilize.runtimes.base import open_session
    from mobilize.sources.models import resolve_model

    target = resolve_model(reference, trust_pickle=args.trust_pickle)
    with open_session(target, args.runtime, threads) as session:
        inputs, source, _ = _choose_inputs(session, target, list(specs or ()) or None, args.no_inputs,
                                           args.use_bundled_input, args.data, args.seed)
    return list(inputs), source


def format_device_stats(r: dict[str, Any]) -> str:
    facts, cpu = r["facts"], r["facts"].get("cpu") or {}
    name = r["device"]["name"]
    before = (r["rounds"][0].get("before") if r["rounds"] else None) or {}
    after = (r["rounds"][-1].get("after") if r["rounds"] else None) or {}
    temp = (f"   temperature {before['temp_c']:.0f} -> {after['temp_c']:.0f} C"
            if before.get("temp_c") is not None and after.get("temp_c") is not None else "")
    load = r.get("machine_load") or {}
    lines = [
        f"Statistics on {name}: {r['model']} ({r['threads']} thread(s), {r['iterations']} iterations after "
        f"{r['warmup']} warm-up, input {r['input_source']})",
        f"  device       {facts.get('machine')}, {cpu.get('model')} x{facts.get('cores')}, {facts.get('os')}, "
        f"Python {facts.get('python')}",
        f"  latency ms   mean {r['latency_ms_mean']:.3f}  p50 {r['latency_ms_p50']:.3f}  p90 {r['latency_ms_p90']:.3f}"
        f"  p99 {r['latency_ms_p99']:.3f}",
        f"               min {r['latency_ms_min']:.3f}  max {r['latency_ms_max']:.3f}  std {r['latency_ms_std']:.3f}"
        f"  iters/s {r['iters_per_s']:.1f}{temp}",
        f"  pushed {r['pushed']['files']} file(s), {r['pushed']['bytes'] / 2**20:.1f} MB"
        + (f"; {r['pushed']['already_there']} already there (cache)" if r["pushed"].get("already_there") else ""),
    ]
    if load.get("busy"):
        lines.append(f"  WARNING the device was busy while it was timed (other processes "
                     f"{100 * load.get('others_cpu_share', 0):.0f}% of its cores)")
    return "\n".join(lines)
