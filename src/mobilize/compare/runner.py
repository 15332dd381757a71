"""Run a plan: each variant in its own processes (build, then run), interleaved timed rounds,
every failure recorded with its stage, results written after every step so Ctrl-C keeps them.

    >>> report = run_plan(CompareConfig(model="zoo:digits_mobilenet_v2", data="digits:test"), load_plan("quick"))
    >>> [(v["name"], v["outcome"]) for v in report["variants"]]
    [('eager-fp32', 'OK'), ('fused', 'OK'), ('torchscript-frozen', 'OK')]
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from mobilize.bench.stats import BenchStats
from mobilize.compare.worker import Job
from mobilize.errors import UserError

OUTCOMES = ("OK", "EXPORT_FAIL", "LOAD_FAIL", "RUN_FAIL", "MISMATCH", "TIMEOUT")
STAGE_OUTCOME = {"start": "EXPORT_FAIL", "export": "EXPORT_FAIL", "passes": "EXPORT_FAIL", "load": "LOAD_FAIL",
                 "run": "RUN_FAIL", "accuracy": "RUN_FAIL", "bench": "RUN_FAIL"}


@dataclasses.dataclass(frozen=True)
class CompareConfig:
    model: str
    data: str | None
    """Data for accuracy and benchmark inputs (None: seeded random inputs)."""
    calibration: str | None = None
    input_specs: tuple = ()
    out_dir: str = "out/compare"
    threads: int = 2
    iterations: int = 50
    """Timed iterations per variant, spread over the rounds."""
    rounds: int = 5
    accuracy_samples: int = 1000
    timeout_s: float = 600.0
    """Per stage (build, load+accuracy, each timed round)."""
    trust_pickle: bool = False


class Worker:
    """One spawned process and its pipe; ``expect`` waits for a message with a timeout."""

    def __init__(self, job: Job):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        from mobilize.compare import worker

        self.process = ctx.Process(target=worker.main, args=(child, job), daemon=True)
        self.process.start()
        child.close()
        self.stage = "start"

    def expect(self, kinds: tuple[str, ...], timeout_s: float) -> tuple:
        """The next message of one of ``kinds``; raises StageFailure on error, crash or timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.conn.poll(left):
                self.kill()
                raise StageFailure("TIMEOUT", self.stage, f"no answer within {timeout_s:.0f} s in stage '{self.stage}'")
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                self.process.join(5)
                code = self.process.exitcode
                how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
                       else f"exited with code {code}")
                raise StageFailure(STAGE_OUTCOME.get(self.stage, "RUN_FAIL"), self.stage,
                                   f"process crashed ({how}) in stage '{self.stage}'") from None
            if msg[0] == "stage":
                self.stage = msg[1]
            elif msg[0] == "error":
                raise StageFailure(STAGE_OUTCOME.get(msg[1], "RUN_FAIL"), msg[1], msg[2], msg[3])
            elif msg[0] in kinds:
                return msg

    def send(self, *msg: Any) -> None:
        try:
            self.conn.send(msg)
        except (BrokenPipeError, OSError):
            pass

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)

    def finish(self, timeout_s: float = 30.0) -> None:
        """Let a worker that has sent its result exit by itself (so it cleans up), then make sure."""
        self.process.join(timeout_s)
        self.kill()

    def stop(self) -> None:
        self.send("stop")
        self.process.join(10)
        self.kill()


class StageFailure(Exception):
    def __init__(self, outcome: str, stage: str, message: str, trace: str = ""):
        super().__init__(message)
        self.outcome, self.stage, self.message, self.trace = outcome, stage, message, trace


def _job(cfg: CompareConfig, kind: str, variant: dict, reference_path: str, artifact: str | None = None) -> Job:
    return Job(kind=kind, model=cfg.model, variant=variant, input_specs=[s.to_json() for s in cfg.input_specs],
               data=cfg.data, calibration=cfg.calibration, out_dir=str(Path(cfg.out_dir) / "artifacts"),
               threads=cfg.threads, accuracy_samples=cfg.accuracy_samples, reference_path=reference_path,
               artifact=artifact, trust_pickle=cfg.trust_pickle)


def run_plan(cfg: CompareConfig, plan, progress: Callable[[str], None] | None = None,
             on_update: Callable[[dict], None] | None = None) -> dict[str, Any]:
    progress = progress or (lambda text: None)
    variants = list(plan.variants)
    steps = 1 + sum(2 if v.export else 1 for v in variants) + cfg.rounds
    done = 0

    def tick(text: str) -> None:
        nonlocal done
        done += 1
        progress(f"[{done}/{steps}] {text}")

    results = {v.name: {"name": v.name, "outcome": "PENDING", "stage": None, "notes": [], "artifact": None,
                        "format": None, "runtime": None, "size_bytes": None, "accuracy": None}
               for v in variants}
    report = {"model": cfg.model, "plan": plan.name, "data": cfg.data, "threads": cfg.threads,
              "rounds": cfg.rounds, "iterations": cfg.iterations, "variants": list(results.values()),
              "complete": False}
    update = on_update or (lambda r: None)
    workdir = Path(tempfile.mkdtemp(prefix="mobilize-compare-"))
    reference_path = str(workdir / "reference.pt")
    workers: dict[str, Worker] = {}
    try:
        ref = Worker(_job(cfg, "reference", {"name": "reference"}, reference_path))
        try:
            info = ref.expect(("done",), cfg.timeout_s)[1]
        except StageFailure as exc:
            raise UserError(f"the float reference failed: {exc.message}") from None
        finally:
            ref.finish()
        report["accuracy_samples"] = info["samples"]
        report["labelled"] = info["labelled"]
        tick("float reference outputs")
        for v in variants:
            r = results[v.name]
            artifact = None
            try:
                if v.export:
                    progress(f"[{done + 1}/{steps}] {v.name}: export")
                    builder = Worker(_job(cfg, "build", v.to_dict(), reference_path))
                    try:
                        built = builder.expect(("built",), cfg.timeout_s)[1]
                    finally:
                        builder.finish()
                    artifact = built["artifact"]
                    r.update(artifact=artifact, format=built["format"], size_bytes=built["size_bytes"])
                    r["notes"] += built["notes"]
                    r["quantized"] = built["quantized"]
                    r.update({k: v2 for k, v2 in built.get("details", {}).items() if k not in r})
                    tick(f"{v.name}: exported")
                progress(f"[{done + 1}/{steps}] {v.name}: load and accuracy")
                w = Worker(_job(cfg, "run", v.to_dict(), reference_path, artifact))
                ready = w.expect(("ready",), cfg.timeout_s)[1]
                workers[v.name] = w
                r.update(runtime=ready["runtime"], format=r["format"] or ready["format"], load_ms=ready["load_ms"],
                         first_run_ms=ready["first_run_ms"], accuracy=ready["accuracy"])
                r["notes"] += [n for n in ready["notes"] if n not in r["notes"]]
                r.update(ready.get("details", {}))
                if ready.get("quantized") is not None:
                    r["quantized"] = ready["quantized"]
                if r["size_bytes"] is None:
                    r["size_bytes"] = ready.get("size_bytes")
                r["outcome"], r["stage"] = "RUNNING", None
                tick(f"{v.name}: loaded, accuracy measured")
            except StageFailure as exc:
                r.update(outcome=exc.outcome, stage=exc.stage)
                r["notes"].append(f"{exc.outcome} in {exc.stage}: {exc.message}")
                if v.export and artifact is None:
                    done += 1  # its load step will not run
                tick(f"{v.name}: {exc.outcome}")
            update(report)
        _interleaved_rounds(cfg, workers, results, tick, update, report)
        _finish(results, report)
        report["complete"] = True
        update(report)
        return report
    finally:
        for w in workers.values():
            w.stop()
        for p in workdir.glob("*"):
            p.unlink()
        workdir.rmdir()


def _interleaved_rounds(cfg, workers, results, tick, update, report) -> None:
    per_round = max(1, cfg.iterations // cfg.rounds)
    times: dict[str, list[int]] = {n: [] for n in workers}
    totals: dict[str, int] = {n: 0 for n in workers}
    round_medians: dict[str, list[float]] = {n: [] for n in workers}
    rss: dict[str, float] = {}
    for w in workers.values():  # warm-up, untimed
        w.send("bench", 3)
    for name, w in list(workers.items()):
        _receive_round(name, w, cfg, results, workers, None, None, None, None)
    for r in range(cfg.rounds):
        names = list(workers)
        if not names:
            break
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            if name in workers:
                workers[name].send("bench", per_round)
                _receive_round(name, workers[name], cfg, results, workers, times, totals, round_medians, rss)
        tick(f"timed round {r + 1}/{cfg.rounds}")
        update(report)
    for name in list(workers):
        res = results[name]
        if not times[name]:
            continue
        stats = BenchStats.from_times_ns(times[name], totals[name]).to_json()
        res.update({k: v for k, v in stats.items()})
        res["latency_ms_round_medians"] = round_medians[name]
        res["peak_rss_mb"] = rss.get(name)


def _receive_round(name, w, cfg, results, workers, times, totals, round_medians, rss) -> None:
    try:
        msg = w.expect(("times",), cfg.timeout_s)
    except StageFailure as exc:
        results[name].update(outcome=exc.outcome, stage="bench")
        results[name]["notes"].append(f"{exc.outcome} in bench: {exc.message}")
        workers.pop(name)
        return
    if times is not None:
        times[name].extend(msg[1])
        totals[name] += msg[2]
        round_medians[name].append(statistics.median(msg[1]) / 1e6)
        rss[name] = msg[3]


def _finish(results: dict, report: dict) -> None:
    """Outcomes (MISMATCH rules), speedups against eager fp32 and top-1 drop."""
    ref = next((r for r in results.values() if r["name"] == "eager-fp32" and r.get("latency_ms_p50")), None)
    ref_top1 = ref["accuracy"].get("top1") if ref and ref.get("accuracy") else None
    for r in results.values():
        acc = r.get("accuracy")
        if r["outcome"] == "RUNNING":
            r["outcome"] = "OK"
            if acc and _mismatch(acc, bool(r.get("quantized"))):
                r["outcome"], r["stage"] = "MISMATCH", "accuracy"
                r["notes"].append("MISMATCH: outputs differ from the float reference beyond tolerance "
                                  f"(cosine {acc['cosine']}, top-1 agreement {acc['top1_agreement']}, "
                                  f"max abs {acc['max_abs']})" if acc.get("finite", True) else
                                  "MISMATCH: the outputs contain NaN or inf")
        if acc and ref_top1 is not None and acc.get("top1") is not None:
            acc["top1_drop"] = ref_top1 - acc["top1"]
        if ref and r.get("latency_ms_p50"):
            r["speedup_vs_eager_fp32"] = ref["latency_ms_p50"] / r["latency_ms_p50"]
    report["reference_variant"] = ref["name"] if ref else None


def _mismatch(acc: dict, is_quantized: bool) -> bool:
    if not acc.get("finite", True) or acc.get("cosine") is None:
        return True  # NaN or inf in the outputs
    if is_quantized:
        return acc["cosine"] < 0.9 or acc["top1_agreement"] < 0.8
    return acc["cosine"] < 0.9999 or acc["top1_agreement"] < 0.99
