"""Host verdict, arm64 verdict (QEMU) and their agreement, per variant of one or more plans on the default model.

Runs `mobilize compare --plan P --verify-on arm64` for each plan (after `sudo bash scripts/setup-arm64.sh`) and
prints one line per variant: arm64 outcome and SQNR against the float model, the host's, and arm64 vs host
(SQNR, top-1 agreement).  Emulated times are not latency; none is printed.

    .venv/bin/python benchmarks/arm64_agreement.py [--plan arm64 --plan runtimes] [--cpu cortex-a76] [--samples 64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from mobilize.arm64 import report_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="append", help="plans to run (default: arm64 and runtimes)")
    parser.add_argument("--cpu", default="cortex-a76", help="QEMU CPU model")
    parser.add_argument("--out", default="out/arm64_agreement", help="folder for each plan's compare output")
    args = parser.parse_args()
    for plan in args.plan or ["arm64", "runtimes"]:
        out = Path(args.out) / plan
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "mobilize", "compare", "--plan", plan, "--verify-on", "arm64", "--arm64-cpu",
               args.cpu, "--iter", "10", "--rounds", "2", "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{plan}: compare exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
            continue
        report = json.loads((out / "report.json").read_text())
        print(f"== plan {plan} ({time.monotonic() - t0:.0f} s wall, emulation included)")
        for line in report_lines(report):
            print(line)


if __name__ == "__main__":
    main()
