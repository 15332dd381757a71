"""Is compare's pick decided by the files or by noise?  N back-to-back ``mobilize compare --plan runtimes`` runs on
the default model, then every OK file of the last run timed right after in p1.py's bare loop (mobilize's Session,
``timed_loop``, interleaved rounds, the order rotating each round) on the unit compare picked on (report.json's
``unit``: the same work for every file, float input to float answer with each file's own conversions timed), so
the check is the same work on both sides.

A run's pick counts as right when it is the fastest file of that bare loop, or inside its noise: the ratio
pick / fastest (geometric mean of paired round ratios with its 95% t interval, the estimator compare races with)
has an interval that includes 1.  The runs rebuild every file, so the files of run i and the last run are the same
recipes on the same model (their sizes are printed to show it); the bare loop times the last run's files.

    .venv/bin/python benchmarks/pick_stability.py [--runs 10] [--rounds 9] [--iter 50] [--out out/pick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from p1 import MODEL, time_files

from mobilize.accuracy.stats import ratio_ci
from mobilize.bench.racing import ESTIMATOR, geometric_mean
from mobilize.sources.data import open_data
from mobilize.core.target import host_cpu
from mobilize.runtimes.base import Unit
from mobilize.zoo import ZOO


def run_compare(out: Path, plan: str) -> dict:
    cmd = [str(Path(sys.executable).parent / "mobilize"), "compare", f"zoo:{MODEL}", "--plan", plan, "-o", str(out)]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"compare failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    report = json.loads((out / "report.json").read_text())
    report["_wall_s"] = time.perf_counter() - start
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--plan", default="runtimes")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--iter", type=int, default=50, help="timed runs per file per round")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--samples", type=int, default=200, help="digits:test samples for top-1 in the bare loop")
    parser.add_argument("--out", default="out/pick")
    args = parser.parse_args()
    out = Path(args.out)
    cpu = host_cpu().describe()
    picks = []
    for i in range(args.runs):
        report = run_compare(out / f"run{i}", args.plan)
        rec = report.get("recommended") or {}
        picks.append(rec.get("name"))
        tied = ",".join(rec.get("tied") or []) or "-"
        print(f"run {i}: recommended {rec.get('name')} (tied with: {tied}; {report['_wall_s']:.0f} s)", flush=True)
    last = json.loads((out / f"run{args.runs - 1}" / "report.json").read_text())
    files = {v["name"]: Path(v["artifact"]) for v in last["variants"]
             if v["outcome"] == "OK" and v.get("artifact") and not v.get("on_device_only")}
    spec = ZOO.get(MODEL).input_specs[0]
    xs, ys = open_data("digits:test").labelled_sample_lists([spec], args.samples)
    unit = last.get("unit") or "file"  # a report from before compare timed the same work timed each file alone
    got, medians, top1 = time_files(files, xs, ys, args.threads, args.rounds, args.iter, unit)
    fastest = min(files, key=lambda n: geometric_mean(medians[n]))
    print(f"\nbare loop right after ({args.rounds} interleaved rounds of {args.iter} runs, {args.threads} thread(s); "
          f"timed on the unit compare picked on: {Unit(unit).label}):")
    print(f"{'file':<18} {'p50 ms':>8} {'time / fastest':>28} {'top-1 %':>8}")
    inside = {}
    for n in sorted(files, key=lambda n: geometric_mean(medians[n])):
        ci = ratio_ci(medians[n], medians[fastest])
        inside[n] = n == fastest or ci.low <= 1.0 <= ci.high
        print(f"{n:<18} {got[n].stats().latency_ms_p50:8.3f} {ci.ratio:8.2f} (95% CI {ci.low:.2f}-{ci.high:.2f}) "
              f"{top1[n]:8.2f}{'  <- fastest' if n == fastest else ('  (inside its noise)' if inside[n] else '')}")
    right = sum(bool(p) and inside.get(p, False) for p in picks)
    print(f"\nCPU: {cpu}; ratios: {ESTIMATOR}")
    print(f"picks right (the fastest, or its ratio to the fastest has a 95% CI including 1): {right} of {len(picks)} "
          f"({', '.join(str(p) for p in picks)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
