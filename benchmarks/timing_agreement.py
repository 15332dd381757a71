"""Does compare's p50 agree with a bare loop over the same artifact?  (target: every ratio within 5%)

Runs `mobilize compare` on a model (default zoo:mobilenet_v2, 2 threads) and adds, to compare's own
timed rounds, one *bare* round per variant: the same artifact file (or, for eager variants, the same
prepared module) opened in this one process and timed in a plain `for` loop around the same call compare
times for ``--unit`` (:func:`mobilize.runtimes.base.timed_call`: by default the same work, from the float input
to a float answer with the file's own conversions inside; ``--unit file``: ``run_prepared`` on the file's own
input), same threads, same input, same untimed warm-up runs. Each bare round comes right after compare's round
of the same variant, so whatever the host does meanwhile hits both columns alike.

Why interleaved and not "compare first, bare loops afterwards": on this shared 2-core VM the same
file's p50 drifts by 20-40% within seconds with nothing else running (ONNX fp32 MobileNetV2 at
2 threads, twelve 50-iteration loops back to back in one process: 3.08-3.90 ms; at 1 thread
5.15-7.46 ms). Two measurements taken minutes apart differ by more than 5% on their own, so only
a comparison taken in the same time window can test compare's own disturbance.

Prints each variant's compare p50, bare p50, their ratio, its 95% interval from the paired round
medians (compare's round / the bare round next to it) and the CPU. PASS: every ratio within the
tolerance; NOISE: some are not, but each of their intervals reaches into the band (the deviation
is not told apart from the machine's own drift); FAIL (exit 1): a whole interval lies outside the
band, i.e. compare's timing differs from the bare loop's by more than the tolerance beyond noise.

    .venv/bin/python benchmarks/timing_agreement.py [--model zoo:mobilenet_v2] [--threads 2] [--tolerance 0.05]
                                                    [--unit same-work|file]

With ``--lean-vs-torch`` it asks another question: does a file time the same in compare's lean timing worker
(its runtime only, no torch) as in a torch worker (torch imported and its threads set, as every compare worker
timed before)?  Both kinds of worker are started for every file whose runtime needs no torch (ONNX Runtime,
OpenVINO, LiteRT), fed the same saved sample, and visited in interleaved rounds (the order rotates each round);
it prints each file's two p50s, their ratio (torch / lean) with its 95% interval from the paired round
medians, each worker's RSS and the CPU.  The files come from an earlier run's folder (``--from
out/compare/artifacts``) or are built here from ``--recipes`` with ``mobilize.optimize``.

    .venv/bin/python benchmarks/timing_agreement.py --lean-vs-torch [--from DIR] [--rounds 9] [--iter 50]

With ``--host-vs-own`` it asks whether a torch-timed variant (eager, TorchScript, ExecuTorch) times the same in
compare's shared timing host (one torch process for all of them, :mod:`mobilize.compare.host`) as in a torch
process of its own: it runs compare (default model and plan) and, for every variant compare hosted, opens the same
timing bundle in a one-variant host; each own-process round runs right after (or, where the rotation wraps,
before) the shared host's round of the same variant.  It prints both p50s, their ratio (shared / own) with its 95%
interval from the paired round medians, each process's peak RSS and the CPU.

    .venv/bin/python benchmarks/timing_agreement.py --host-vs-own [--plan FILE] [--rounds 12] [--iter 240]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


class BareSessions:
    """The OK variants opened again in this process, timed like compare's workers (warm-up, then a loop)."""

    def __init__(self, run, threads: int, unit: str = "same-work"):
        import torch

        from mobilize.core.artifact import Artifact
        from mobilize.pipeline.build import prepare
        from mobilize.core.context import Context
        from mobilize.runtimes.base import RuntimeOptions, as_array, open_session, timed_call
        from mobilize.sources.data import open_data
        from mobilize.core.inputs import apply_memory_format
        from mobilize.sources.models import ModelSource, resolve_model

        torch.set_num_threads(threads)  # as every compare worker does
        cfg = run.cfg
        source = resolve_model(cfg.model)
        self.sessions, self.calls = {}, {}
        for v in run.variants:
            if v.name not in run.workers:  # failed, or not timed
                continue
            r = run.results[v.name]
            if r.artifact:
                target = Artifact.from_file(r.artifact)
            else:
                ctx = Context(input_specs=list(cfg.input_specs))
                target = ModelSource(prepare(resolve_model(cfg.model).module, v.recipe, ctx), cfg.model,
                                     list(ctx.input_specs))
            options = RuntimeOptions(**dict(v.recipe.runtime.__dict__, threads=threads))
            session = open_session(target, v.runtime, options=options)
            specs = getattr(target, "input_specs", None) or list(cfg.input_specs)
            if cfg.data:
                feed = [apply_memory_format(open_data(cfg.data).samples(s, 1)[0], s) for s in specs[:1]]
            else:
                feed = session.example_inputs()
            if not type(session).needs_torch:  # as compare's lean worker is fed: the reference's sample, contiguous
                feed = [as_array(x) for x in feed]  # NCHW numpy (a channels-last tensor would spare its transpose)
            native = session.prepare(feed)
            session.checked_run(native, feed)
            self.sessions[v.name], self.calls[v.name] = session, timed_call(session, feed, unit, native)
        del source

    def run_round(self, name: str, n: int):
        from mobilize.bench.harness import warm_round

        fn, arg = self.calls[name]
        return warm_round(fn, arg, n)  # as a worker answers compare's Bench, on the same unit

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()


def paired_schedule(original, twinned, twin_round, twin_times: dict):
    """compare's ``schedule`` where every round of a variant in ``twinned`` is followed at once by a round of its
    twin (``twin_round(name, n)``), so both meet the same machine state; the twins' RoundTimes go to
    ``twin_times``.  The twins stay out of compare's own rounds, so its race decides as it does without them (as
    schedule entries of their own they were raced out as non-candidates after the first round)."""
    import statistics

    from mobilize.bench.rounds import RoundTimes

    def schedule(names, run_round, rounds, iterations, warmup=3, **kw):
        warmed = set() if warmup > 0 else set(twinned)

        def with_twin(name, n):
            got = run_round(name, n)
            if got is None or name not in twinned:
                return got
            times, total = twin_round(name, n)
            if name not in warmed:  # schedule's first call per variant is its warm-up
                warmed.add(name)
                return got
            rt = twin_times.setdefault(name, RoundTimes())
            rt.times_ns.extend(times)
            rt.total_ns += total
            rt.round_medians_ms.append(statistics.median(times) / 1e6)
            return got

        return original(names, with_twin, rounds, iterations, warmup=warmup, **kw)

    return schedule


def with_bare_rounds(threads: int, bare_times: dict, unit: str = "same-work"):
    """A PlanRun whose timed rounds also visit a bare in-process loop of every timed variant."""
    from mobilize.compare import plan_run as runner

    class PlanRunWithBare(runner.PlanRun):
        def _rounds(self) -> None:
            bare = BareSessions(self, threads, unit)
            original = runner.schedule

            runner.schedule = paired_schedule(original, bare.sessions, bare.run_round, bare_times)
            try:
                super()._rounds()
            finally:
                runner.schedule = original
                bare.close()

    return PlanRunWithBare


def with_own_rounds(own_times: dict, own_peaks: dict):
    """A PlanRun whose timed rounds also visit, for every variant in the shared timing host, the same variant
    in a torch process of its own (a one-variant host, fed the same bundle)."""
    from mobilize.compare import plan_run as runner
    from mobilize.compare.host import Hosted, TimingHost

    class PlanRunWithOwn(runner.PlanRun):
        def _rounds(self) -> None:
            own = {}
            for name, w in self.workers.items():
                if isinstance(w, Hosted):
                    solo = TimingHost(self.spawn(self.job("time-host", {"name": f"own-{name}"})))
                    own[name] = solo.open(name, w.job, self.cfg.timeout_s)[0]
            original = runner.schedule

            def own_round(name, n):
                w = own[name]
                w.send(runner.Bench(n, runner.ROUND_WARMUP_RUNS, runner.ROUND_WARMUP_S))
                got = w.expect(runner.Times, self.cfg.timeout_s)
                return got.times_ns, got.total_ns

            runner.schedule = paired_schedule(original, own, own_round, own_times)
            try:
                super()._rounds()
            finally:
                runner.schedule = original
                for name, w in own.items():
                    own_peaks[name] = w.child.peak_rss_mb()
                    w.host.stop()

    return PlanRunWithOwn


def host_vs_own(args) -> int:
    import mobilize
    from mobilize.accuracy.stats import ratio_ci, spread_percent
    from mobilize.bench.racing import Race
    from mobilize.compare import plan_run as runner
    from mobilize.core.target import host_cpu

    class NoRace(Race):  # every variant runs every round: the comparison needs all of them paired
        def after_round(self, r, medians):
            super().after_round(r, medians)
            return list(medians) if r + 1 < args.rounds else []

    out = Path(args.output or tempfile.mkdtemp(prefix="host-vs-own-"))
    own: dict = {}
    peaks: dict = {}
    runner.PlanRun = with_own_rounds(own, peaks)
    runner.Race = NoRace
    t0 = time.monotonic()
    report = mobilize.compare(args.model or "", args.plan, mobilize.CompareConfig(
        threads=args.threads, iterations=args.iter, rounds=args.rounds, out_dir=str(out),
        accuracy_samples=args.accuracy_samples), progress=lambda done, total, text: print(
            f"  [{done}/{total}] {text}", file=sys.stderr))
    mem = report.get("timing_memory") or {}
    host_peak = max((p["peak_rss_mb"] for p in mem.get("processes", []) if len(p["variants"]) > 1), default=0.0)
    print(f"CPU: {host_cpu().describe()}")
    print(f"compare {args.model or '(default model)'} --plan {args.plan}: {time.monotonic() - t0:.0f} s; "
          f"{args.threads} threads; {args.rounds} interleaved rounds of {max(1, args.iter // args.rounds)} runs, "
          f"each variant's own-process round next to its shared-host round")
    print(f"{'variant':<20} {'host p50':>9} {'own p50':>9} {'ratio':>6} {'95% CI':>13} {'spread host/own':>16} "
          f"{'own RSS MB':>10}")
    saved = {}
    for v in report["variants"]:
        rt = own.get(v["name"])
        if rt is None or not v.get("latency_ms_round_medians"):
            continue
        own_p50 = statistics.median(rt.times_ns) / 1e6
        ci = ratio_ci(v["latency_ms_round_medians"], rt.round_medians_ms)
        saved[v["name"]] = {"host_p50_ms": v["latency_ms_p50"], "own_p50_ms": own_p50,
                            "ratio": v["latency_ms_p50"] / own_p50, "ratio_ci95": [ci.low, ci.high],
                            "own_peak_rss_mb": peaks.get(v["name"])}
        print(f"{v['name']:<20} {v['latency_ms_p50']:>7.3f}ms {own_p50:>7.3f}ms {v['latency_ms_p50'] / own_p50:>6.3f} "
              f"{ci.low:>6.3f}-{ci.high:<6.3f} {spread_percent(v['latency_ms_round_medians']):>7.0f}%/"
              f"{spread_percent(rt.round_medians_ms):.0f}% {peaks.get(v['name'], 0):>10.0f}")
    print(f"ratio = shared host p50 / own process p50; an interval containing 1 is agreement within noise. "
          f"Shared host peak RSS {host_peak:.0f} MB for {len(saved)} variants; timing workers in all "
          f"{mem.get('peak_mb', 0):.0f} MB")
    (out / "host-vs-own.json").write_text(json.dumps({"cpu": host_cpu().describe(), "variants": saved,
                                                      "timing_memory": mem}, indent=2) + "\n")
    return 0


def lean_files(args) -> list[Path]:
    """The files to time: those under ``--from`` whose runtime needs no torch, else built from ``--recipes``."""
    import mobilize
    from mobilize.core.artifact import format_for_path
    from mobilize.backends import default_runtime
    from mobilize.compare.timing import lean_runtime
    from mobilize.core.errors import ConfigError

    def lean(path: Path) -> bool:
        try:
            runtime = default_runtime(format_for_path(path))
        except ConfigError:  # a manifest, a side file
            return False
        return runtime is not None and lean_runtime(runtime)

    if args.source:
        return sorted(p for p in Path(args.source).rglob("*") if p.is_file() and lean(p))
    out = Path(tempfile.mkdtemp(prefix="lean-vs-torch-"))
    for recipe in args.recipes.split(","):
        print(f"  building {recipe} ...", file=sys.stderr)
        mobilize.optimize(args.model, recipe, out_dir=str(out / recipe), data="digits:test")
    return sorted(p for p in out.rglob("*") if p.is_file() and lean(p))


def lean_vs_torch(args) -> int:
    from mobilize.accuracy.stats import ratio_ci, spread_percent
    from mobilize.bench.harness import ROUND_WARMUP_RUNS, ROUND_WARMUP_S
    from mobilize.compare.messages import Bench, Job, TimerReady, Times
    from mobilize.compare.worker_handle import Worker
    from mobilize.compare.timing import write_inputs
    from mobilize.sources.data import open_data
    from mobilize.sources.models import resolve_model
    from mobilize.core.target import host_cpu

    files = lean_files(args)
    if not files:
        print("no file whose runtime needs no torch (ONNX Runtime, OpenVINO, LiteRT) was found", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="lean-vs-torch-work-"))
    specs = resolve_model(args.model).input_specs
    write_inputs(str(work / "inputs.npz"), open_data("digits:test").labelled_sample_lists(specs, 1)[0][0])
    workers, ready = {}, {}
    for path in files:
        for kind in ("time", "time-torch"):
            job = Job(kind=kind, model="", variant={"name": "file"}, input_specs=[], data=None, calibration=None,
                      out_dir=str(work), threads=args.threads, accuracy_samples=1, reference_path="",
                      log_path=str(work / f"{path.stem}-{kind}.log"), artifact=str(path),
                      inputs_path=str(work / "inputs.npz"))
            key = (path, kind)
            workers[key] = Worker(job)
            ready[key] = workers[key].expect(TimerReady, 600)
    keys = list(workers)
    per_round = max(1, args.iter // args.rounds)
    medians: dict = {k: [] for k in keys}
    times: dict = {k: [] for k in keys}
    try:
        for i in range(args.rounds):
            for key in keys[i % len(keys):] + keys[:i % len(keys)]:  # the order rotates: no kind always goes first
                workers[key].send(Bench(per_round, ROUND_WARMUP_RUNS, ROUND_WARMUP_S))
                got = workers[key].expect(Times, 600).times_ns
                times[key] += got
                medians[key].append(statistics.median(got) / 1e6)
            print(f"  round {i + 1}/{args.rounds}", file=sys.stderr)
        rss = {k: w.rss_mb() for k, w in workers.items()}
    finally:
        for w in workers.values():
            w.stop()
    print(f"CPU: {host_cpu().describe()}; {args.threads} thread(s); {args.rounds} interleaved rounds of {per_round} "
          f"runs after 3 untimed")
    print(f"{'file':<34} {'runtime':<12} {'lean p50':>9} {'torch p50':>10} {'ratio':>6} {'95% CI':>13} "
          f"{'spread lean/torch':>18} {'RSS lean/torch MB':>18}")
    for path in files:
        lean, torch = (path, "time"), (path, "time-torch")
        p50 = {k: statistics.median(times[k]) / 1e6 for k in (lean, torch)}
        ci = ratio_ci(medians[torch], medians[lean])
        assert not ready[lean].torch_loaded and ready[torch].torch_loaded
        name = f"{path.parent.name}/{path.name}"[-34:]
        print(f"{name:<34} {ready[lean].runtime:<12} {p50[lean]:>7.3f}ms {p50[torch]:>8.3f}ms {p50[torch] / p50[lean]:>6.3f} "
              f"{ci.low:>6.3f}-{ci.high:<6.3f} {spread_percent(medians[lean]):>8.0f}%/{spread_percent(medians[torch]):.0f}% "
              f"{rss[lean]:>9.0f}/{rss[torch]:.0f}")
    print("ratio = torch worker p50 / lean worker p50; an interval containing 1 is agreement within noise")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lean-vs-torch", action="store_true", help="lean timing worker vs torch worker")
    parser.add_argument("--host-vs-own", action="store_true", help="shared timing host vs a torch process per variant")
    parser.add_argument("--from", dest="source", default=None, help="--lean-vs-torch: files under this folder")
    parser.add_argument("--recipes", default="onnx-fp32,onnx-int8,litert-fp32,openvino-fp32",
                        help="--lean-vs-torch without --from: build these")
    parser.add_argument("--model", default=None, help="default zoo:mobilenet_v2 (--lean-vs-torch: the default model)")
    parser.add_argument("--plan", default="default")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iter", type=int, default=None,
                        help="timed iterations over all rounds (default 400; --lean-vs-torch: 450)")
    parser.add_argument("--rounds", type=int, default=None, help="default 20 (--lean-vs-torch: 9)")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--unit", choices=["same-work", "file"], default="same-work",
                        help="what compare and the bare loop time (compare --unit; default same-work)")
    parser.add_argument("--accuracy-samples", type=int, default=1000, help="--host-vs-own: compare's accuracy samples")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    if args.host_vs_own:
        args.iter, args.rounds = args.iter or 240, args.rounds or 12
        return host_vs_own(args)
    if args.lean_vs_torch:
        args.model = args.model or "zoo:digits_mobilenet_v2"
        args.iter, args.rounds = args.iter or 450, args.rounds or 9
        return lean_vs_torch(args)
    args.model, args.iter, args.rounds = args.model or "zoo:mobilenet_v2", args.iter or 400, args.rounds or 20

    import mobilize
    from mobilize.accuracy.stats import ratio_ci, spread_percent
    from mobilize.compare import plan_run as runner
    from mobilize.core.target import host_cpu

    out = Path(args.output or tempfile.mkdtemp(prefix="timing-agreement-"))
    bare: dict = {}
    runner.PlanRun = with_bare_rounds(args.threads, bare, args.unit)  # compare's own run, with bare rounds added
    t0 = time.monotonic()
    report = mobilize.compare(args.model, args.plan, mobilize.CompareConfig(
        threads=args.threads, iterations=args.iter, rounds=args.rounds, out_dir=str(out), unit=args.unit),
        progress=lambda done, total, text: print(f"  [{done}/{total}] {text}", file=sys.stderr))
    compare_s = time.monotonic() - t0
    print(f"CPU: {host_cpu().describe()}")
    print(f"compare {args.model} --plan {args.plan}: {compare_s:.0f} s; {args.threads} threads; {args.iter} "
          f"iterations in {args.rounds} rounds; unit {args.unit}; a bare in-process round of every variant next to "
          f"its compare round")
    print(f"{'variant':<20} {'compare p50':>12} {'bare p50':>10} {'ratio':>7} {'paired 95% CI':>15} "
          f"{'compare spread':>14} {'bare spread':>11}  verdict")
    worst, biased, outside, saved = 0.0, [], [], {}
    for v in report["variants"]:
        if v["name"] not in bare or not v.get("latency_ms_p50"):
            continue
        rt = bare[v["name"]]
        bare_p50 = statistics.median(rt.times_ns) / 1e6
        ratio = v["latency_ms_p50"] / bare_p50
        ci = ratio_ci(v["latency_ms_round_medians"], rt.round_medians_ms)  # round by round: same machine state
        worst = max(worst, abs(ratio - 1))
        within = abs(ratio - 1) <= args.tolerance
        if not within:
            outside.append(v["name"])
        beyond = ci.low > 1 + args.tolerance or ci.high < 1 - args.tolerance
        if beyond:
            biased.append(v["name"])
        verdict = f"within {args.tolerance:.0%}" if within else f"OUTSIDE {args.tolerance:.0%}"
        verdict += (f", beyond noise (the whole interval is outside {args.tolerance:.0%})" if beyond
                    else "" if within else ", inside noise (the interval reaches the band)")
        saved[v["name"]] = {"compare_p50_ms": v["latency_ms_p50"], "bare_p50_ms": bare_p50, "ratio": ratio,
                            "ratio_ci95": [ci.low, ci.high], "compare_round_medians_ms": v["latency_ms_round_medians"],
                            "bare_round_medians_ms": rt.round_medians_ms}
        print(f"{v['name']:<20} {v['latency_ms_p50']:>10.2f}ms {bare_p50:>8.2f}ms {ratio:>7.3f} "
              f"{ci.low:>7.3f}-{ci.high:<7.3f} {v.get('round_spread_percent') or 0:>13.0f}% "
              f"{spread_percent(rt.round_medians_ms) or 0:>10.0f}%  {verdict}")
    print(f"worst deviation {worst:.1%}; outside {args.tolerance:.0%}: {', '.join(outside) or 'none'}; "
          f"off by more than {args.tolerance:.0%} beyond noise: {', '.join(biased) or 'none'}")
    verdict = "PASS" if not outside else ("NOISE: every deviation past the band is inside the machine's "
                                          "round-to-round noise" if not biased else "FAIL")
    (out / "timing-agreement.json").write_text(json.dumps({"cpu": host_cpu().describe(), "verdict": verdict,
                                                           "variants": saved}, indent=2) + "\n")
    print(f"{verdict}\nreport: {out / 'report.json'}, {out / 'timing-agreement.json'}")
    return 0 if not biased else 1


if __name__ == "__main__":
    sys.exit(main())
