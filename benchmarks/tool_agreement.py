"""mobilize's timing of an OpenVINO IR next to OpenVINO's own ``benchmark_app`` (#28 item 6), on the default model.

The default model's IR, fp32 and int8, built by mobilize (the ``runtimes`` plan's ``openvino-fp32`` and
``openvino-int8`` recipes, int8 calibrated on digits:train), or taken from a compare folder that has them.
For each IR and thread count, interleaved rounds (the order flips each round) of:

- mobilize: the Session and ``warm_round`` compare's timing workers use (``run_prepared`` on one digits:test
  sample), the median of the round; then the same loop again reading the request's own ``latency`` after each
  run (OpenVINO measures it in C++ around the inference alone, outside the Python call); and, before both, the
  loop mobilize ran until it bound prepared inputs once (``infer(inputs, share_inputs=True)`` every run);
- ``benchmark_app -api sync -hint latency`` with ``-load_config`` giving one stream, the thread count and the
  IR's inference precision (its command line refuses -nstreams/-nthreads beside a hint), ``-ip f32`` and the
  same sample (``-i sample.npy``), ``-niter`` as mobilize's loop; its reported median.

Printed per IR and thread count: the medians over rounds and their ratio (mobilize p50 / benchmark_app
median), the part of the gap that is the Python call (mobilize wall - request latency), and every compiled
property in which the two differ (read from each compiled model: mobilize's through ``get_property``,
benchmark_app's from its "Querying optimal runtime parameters" step).  The CPU and the load average
before and after are printed: on a shared machine the ratios of interleaved rounds still compare like
with like, the absolute times do not.

ONNX Runtime: ``onnxruntime_perf_test`` is a C++ tool built from source; the pip wheel does not ship it
(the check below says whether this environment has one on PATH).

    .venv/bin/python benchmarks/tool_agreement.py [--rounds 5] [--iter 300] [--threads 1,2]
        [--compare-dir DIR] [--out out/tool_agreement [--reuse]] [--stock-input]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mobilize.core.artifact import Artifact
from mobilize.bench.harness import warm_round
from mobilize.runtimes.base import open_session
from mobilize.sources.data import open_data
from mobilize.core.target import host_cpu
from mobilize.zoo import DEFAULT_MODEL, ZOO

IRS = ("openvino-fp32", "openvino-int8")
_MEDIAN = re.compile(r"Median:\s+([\d.]+) (ms|us)")
_PROPERTY = re.compile(r"^\[ INFO \]   ([A-Z_]+): (.*)$", re.M)


def build_irs(out: Path, reuse: bool) -> dict[str, Path]:
    """The two IRs from the runtimes plan's recipes, as compare builds them for the default model."""
    if reuse and all((out / f"{DEFAULT_MODEL}-{n}.xml").exists() for n in IRS):
        return {n: out / f"{DEFAULT_MODEL}-{n}.xml" for n in IRS}
    from mobilize.pipeline.build import build
    from mobilize.core.context import Context
    from mobilize.plans.plan import load_plan

    zoo = ZOO.get(DEFAULT_MODEL)
    model = zoo.build().eval()
    plan = load_plan("runtimes").select(list(IRS))
    irs = {}
    for variant in plan.variants:
        ctx = Context(input_specs=list(zoo.input_specs), data=open_data("digits:train"))
        [built] = build(model, variant.recipe, ctx, out / f"{DEFAULT_MODEL}-{variant.name}").artifacts
        irs[variant.name] = built.artifact.path
    return irs


def irs_from_compare(folder: Path) -> dict[str, Path]:
    report = json.loads((folder / "report.json").read_text())
    found = {v["name"]: Path(v["artifact"]) for v in report["variants"] if v["name"] in IRS and v.get("artifact")}
    missing = [n for n in IRS if n not in found]
    if missing:
        raise SystemExit(f"tool_agreement: error: {folder}/report.json has no {', '.join(missing)} "
                         "(run compare with --plan runtimes)")
    return found


def benchmark_app(xml: Path, sample: Path, threads: int, precision: str, iterations: int,
                  stock_input: bool) -> tuple[float, dict[str, str]]:
    """benchmark_app's median (ms) and the compiled properties it printed."""
    exe = shutil.which("benchmark_app", path=str(Path(sys.executable).parent)) or shutil.which("benchmark_app")
    config = {"CPU": {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": str(threads),
                      "INFERENCE_PRECISION_HINT": precision}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(config, fh)
    cmd = [exe, "-m", str(xml), "-d", "CPU", "-hint", "latency", "-load_config", fh.name, "-api", "sync",
           "-niter", str(iterations)]
    if not stock_input:
        cmd += ["-ip", "f32", "-i", str(sample)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(fh.name)
    match = _MEDIAN.search(proc.stdout)
    if proc.returncode != 0 or not match:
        raise RuntimeError(f"benchmark_app failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-800:]}")
    value = float(match.group(1)) / (1000.0 if match.group(2) == "us" else 1.0)
    step8 = proc.stdout.split("Querying optimal runtime parameters", 1)[-1].split("[Step 9/", 1)[0]
    return value, dict(_PROPERTY.findall(step8))


def compiled_properties(session) -> dict[str, str]:
    """Every property the compiled model reports, worded as benchmark_app prints them."""
    props = {}
    for key in session.compiled.get_property("SUPPORTED_PROPERTIES"):
        try:
            value = session.compiled.get_property(key)
        except RuntimeError:
            continue
        props[str(key)] = repr(value) if hasattr(value, "get_type_name") else str(value)
    return props


def mobilize_round(session, native, iterations: int) -> tuple[float, float, float]:
    """(median wall ms of compare's loop, median of the request's own latency ms over a second loop, median wall ms
    of the loop mobilize ran before this change: the inputs passed to every ``infer``)."""
    request = session.request

    def passed_each_run(arrays):
        return list(request.infer(arrays, share_inputs=True).values())

    before, _ = warm_round(passed_each_run, native, iterations)
    times, _ = warm_round(session.run_prepared, native, iterations)  # as compare's workers time a round
    latencies = []
    for _ in range(iterations):
        session.run_prepared(native)
        latencies.append(request.latency)
    return statistics.median(times) / 1e6, statistics.median(latencies), statistics.median(before) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iter", type=int, default=300, help="timed runs per round (benchmark_app -niter too)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--compare-dir", help="take the IRs from this compare folder (--plan runtimes)")
    parser.add_argument("--out", default="out/tool_agreement")
    parser.add_argument("--reuse", action="store_true", help="reuse the IRs a previous run built in --out")
    parser.add_argument("--stock-input", action="store_true",
                        help="let benchmark_app use its defaults for the input: u8 precision, random values")
    args = parser.parse_args()
    load_before = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    irs = irs_from_compare(Path(args.compare_dir)) if args.compare_dir else build_irs(out, args.reuse)
    spec = ZOO.get(DEFAULT_MODEL).input_specs[0]
    [sample] = open_data("digits:test").samples(spec, 1)
    sample = np.ascontiguousarray(np.asarray(sample, dtype=np.float32))
    sample_path = out / "sample.npy"
    np.save(sample_path, sample)
    ort_tool = shutil.which("onnxruntime_perf_test")

    rows, differences = [], {}
    for name, xml in irs.items():
        session = open_session(Artifact.from_file(xml), threads=1)
        native = session.prepare([sample])
        session.checked_run(native, [sample])
        for threads in [int(t) for t in args.threads.split(",")]:
            session.set_threads(threads)
            ours, latency, passed, theirs, their_props = [], [], [], [], {}
            for r in range(args.rounds):
                steps = ["mobilize", "benchmark_app"][:: 1 if r % 2 == 0 else -1]
                for step in steps:
                    if step == "mobilize":
                        wall, lat, before = mobilize_round(session, native, args.iter)
                        ours.append(wall)
                        latency.append(lat)
                        passed.append(before)
                    else:
                        median, their_props = benchmark_app(xml, sample_path, threads, session.precision, args.iter,
                                                            args.stock_input)
                        theirs.append(median)
            mine = compiled_properties(session)
            differences[(name, threads)] = {k: (mine.get(k, "-"), v) for k, v in their_props.items()
                                            if k in mine and mine[k] != v and k != "NETWORK_NAME"}
            a, lat, b = statistics.median(ours), statistics.median(latency), statistics.median(theirs)
            rows.append((name, threads, session.precision, a, lat, b, statistics.median(passed)))
            print(f"  {name} {threads} thread(s): mobilize {' '.join(f'{v:.3f}' for v in ours)} ms; benchmark_app "
                  f"{' '.join(f'{v:.3f}' for v in theirs)} ms", flush=True)
        session.close()

    print(f"\n{DEFAULT_MODEL} {spec.shape}, one digits:test sample; {args.rounds} interleaved rounds of {args.iter} "
          f"runs; medians over rounds of each round's median")
    print("benchmark_app -api sync -hint latency -load_config {NUM_STREAMS 1, INFERENCE_NUM_THREADS T, "
          f"INFERENCE_PRECISION_HINT as the IR}} {'(stock input: u8, random)' if args.stock_input else '-ip f32 -i sample.npy'}")
    print(f"{'IR':<15}{'threads':>8}{'precision':>10}{'mobilize p50':>14}{'request latency':>17}"
          f"{'benchmark_app':>15}{'ratio':>7}{'ratio (latency)':>17}{'inputs each run':>17}{'ratio':>7}")
    for name, threads, precision, a, lat, b, before in rows:
        print(f"{name:<15}{threads:>8}{precision:>10}{a:>11.3f} ms{lat:>14.3f} ms{b:>12.3f} ms{a / b:>7.3f}"
              f"{lat / b:>17.3f}{before:>14.3f} ms{before / b:>7.3f}")
    print("ratio: mobilize p50 (wall time of Session.run_prepared in warm_round, as compare times) / benchmark_app's "
          "median; ratio (latency): the request's own C++-measured latency in mobilize's loop / benchmark_app's "
          "median (benchmark_app reports that same request.latency); inputs each run: mobilize's loop before the inputs "
          "were bound once (infer(inputs, share_inputs=True) every run), its median and ratio")
    for (name, threads), diff in differences.items():
        text = "; ".join(f"{k}: mobilize {m}, benchmark_app {t}" for k, (m, t) in diff.items()) or "none"
        print(f"compiled properties that differ ({name}, {threads} thread(s)): {text}")
    print(f"onnxruntime_perf_test: {ort_tool or 'not on PATH; the onnxruntime pip wheel does not ship it (only the '}"
          f"{'' if ort_tool else 'Python onnxruntime_test: one mean of sess.run, no thread setting, no median)'}")
    print(f"CPU: {host_cpu().describe()}; load average before {' '.join(f'{v:.2f}' for v in load_before)}, "
          f"after {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
