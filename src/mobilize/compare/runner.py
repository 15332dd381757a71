"""Run a plan: each variant in its own processes (build, then load + accuracy), interleaved timed
rounds, every failure recorded with its stage, verdicts from the verify core, results written
after every step so Ctrl-C keeps them.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from mobilize.accuracy.stats import ratio_ci, spread_percent
from mobilize.accuracy.verify import DEFAULT_POLICY, Kind, Policy, Verdict, assess
from mobilize.bench.harness import ROUND_WARMUP_RUNS, ROUND_WARMUP_S
from mobilize.bench.racing import DEFAULT_TIME_BUDGET_S, ESTIMATOR, Race, RaceRecord, geometric_mean
from mobilize.bench.rounds import schedule
from mobilize.compare.messages import (
    Bench, Built, Failed, Job, LintDone, Ready, ReferenceDone, Stage, Stop, TimerReady, Times,
)
from mobilize.compare.host import TimingHost
from mobilize.compare.memory import TimingMemory
from mobilize.compare.timing import lean_runtime
from mobilize.report.results import VariantResult
from mobilize.compare.stages import StageSeconds
from mobilize.core.errors import InternalError, UserError
from mobilize.core.outcome import Outcome
from mobilize.core.paths import make_temp_dir, remove_stale
from mobilize.pipeline.process import Child, Lost


Progress = Callable[[int, int, str], None]
"""Called with (steps done, steps in total, what is happening now)."""


@dataclasses.dataclass(frozen=True)
class CompareConfig:
    model: str = ""
    """Model reference (empty: the built-in default model)."""
    data: str | None = None
    """Data for accuracy and benchmark inputs (None: a default for the model, else seeded random inputs)."""
    calibration: str | None = None
    """Calibration data for int8 (None: the training split of ``data``, or ``data`` itself, noted)."""
    input_specs: tuple = ()
    out_dir: str = "out/compare"
    threads: int | None = None
    """Threads for every runtime (None: all cores)."""
    iterations: int = 50
    """Timed iterations per variant, spread over the rounds."""
    rounds: int = 5
    """Rounds every timed variant runs; then the OK ones race (:mod:`mobilize.bench.racing`)."""
    time_budget_s: float = DEFAULT_TIME_BUDGET_S
    """Seconds for the timed rounds (warm-up and the first ``rounds`` included): racing stops when the next round
    would overrun it, and the variants still within noise of the leader are a tie."""
    accuracy_samples: int = 1000
    timeout_s: float = 600.0
    """Per stage (build, load+accuracy, each timed round)."""
    trust_pickle: bool = False
    target: str = "host"
    policy: Policy = DEFAULT_POLICY
    verbose: bool = False
    """Let workers' stderr through instead of capturing it in ``<out>/logs``."""
    input_names: tuple[str, ...] = ()
    """The model's input names (filled in from its forward signature), to match .npz arrays by name."""
    bound_args: dict = dataclasses.field(default_factory=dict)
    """Non-tensor forward arguments bound by name (``--input sr=16000``)."""
    task: str | None = None
    """The model's task (``--task``); None: guessed from the float model's outputs (and said so)."""
    metric: str | None = None
    """``FILE.py:FUNCTION``: the user's own accuracy measure, judged by ``policy.max_drop_points``."""
    verify_on: str | None = None
    """``arm64``: also check every file on arm64 kernels under QEMU, after the timed rounds (:mod:`mobilize.arm64`)."""
    arm64_cpu: str = "cortex-a76"
    """The QEMU CPU model for ``verify_on`` (its features decide the kernels: fp16, dotprod, i8mm)."""


class ReferenceFailed(UserError):
    """The float reference failed: no variant can be judged.  report.json names the stage (``reference_failure``);
    ``outcome`` says why (a TIMEOUT is the machine's or the model's pace, not the user's input)."""

    def __init__(self, message: str, *, outcome: Outcome, stage: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.outcome, self.failed_stage = outcome, stage


class StageFailure(Exception):
    def __init__(self, outcome: Outcome, stage: str, message: str, trace: str = "", internal: bool = False):
        super().__init__(message)
        self.outcome, self.stage, self.message, self.trace, self.internal = outcome, stage, message, trace, internal


class Worker:
    """A compare worker: a :class:`~mobilize.pipeline.process.Child` running ``compare.worker.main`` (or the lean timing
    worker), its stderr in the job's log; ``expect`` waits for a message type within a deadline."""

    def __init__(self, job: Job, on_start: Callable[["Worker"], None] = lambda worker: None, target: Any = None):
        from mobilize.compare import worker

        self.job = job
        self.stage = "start"
        self.seconds: dict[str, float] = {}
        """Wall seconds per stage, from the child's start to the answer ``expect`` returned last."""
        self._since = time.monotonic()
        # an interrupt is the parent's to handle: it stops every worker, this one included from its start
        def started(child: Child) -> None:  # registered before an interrupt can cut in: stoppable from here on
            self.child = child
            on_start(self)

        self.child = Child(target or worker.main, (job,), log_path=job.log_path, capture_stderr=True,
                           on_start=started, preload=target is None and job.kind != "time")

    def expect(self, kind: type, timeout_s: float) -> Any:
        """The next message of type ``kind``; raises StageFailure on error, crash or timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = self.child.recv(deadline - time.monotonic())
            except Lost as lost:
                self._clock(time.monotonic())
                if lost.timed_out:
                    raise StageFailure(Outcome.TIMEOUT, self.stage,
                                       f"no answer within {timeout_s:g} s in stage '{self.stage}'") from None
                raise StageFailure(Outcome.for_stage(self.stage), self.stage, f"the process {lost} in stage "
                                   f"'{self.stage}'{self.child.log_tail()}") from None
            if isinstance(msg, Stage):
                self._clock(msg.at)
                self.stage = msg.name
            elif isinstance(msg, Failed):
                self._clock(time.monotonic())
                raise StageFailure(Outcome.for_stage(msg.stage), msg.stage, msg.message + self.child.log_tail(),
                                   msg.trace, msg.internal)
            elif isinstance(msg, kind):
                self._clock(time.monotonic())
                return msg

    def _clock(self, now: float) -> None:
        self.seconds[self.stage] = self.seconds.get(self.stage, 0.0) + max(0.0, now - self._since)
        self._since = now

    def send(self, msg: Any) -> None:
        self.child.send(msg)

    def rss_mb(self) -> float:
        return self.child.rss_mb()

    def kill(self) -> None:
        self.child.kill()

    def finish(self, timeout_s: float = 30.0) -> None:
        """Let a worker that has sent its result exit by itself (so it cleans up), then make sure."""
        self.child.finish(timeout_s)

    def stop(self) -> None:
        self.send(Stop())
        self.child.finish(10)


class PlanRun:
    """One compare run: its results, workers and report; ``run`` executes it."""

    def __init__(self, cfg: CompareConfig, plan, progress: Progress | None, on_update: Callable[[dict], None] | None):
        self.cfg, self.plan = cfg, plan
        self.variants = list(plan.variants)
        self.results = {v.name: VariantResult(v.name) for v in self.variants}
        self.reference_name = getattr(plan, "reference", None) or self.variants[0].name
        self.progress = progress or (lambda done, total, text: None)
        self.update = on_update or (lambda report: None)
        self.steps = 1 + sum(2 if v.export else 1 for v in self.variants) + cfg.rounds
        self.done = 0
        self.workers: dict[str, Worker] = {}
        self.reference: ReferenceDone | None = None
        self.reference_failure: dict[str, Any] | None = None
        self.timing_memory = TimingMemory()
        self.host: TimingHost | None = None
        """The shared timing host of the torch-timed variants (:mod:`mobilize.compare.host`), once one is needed."""
        self.recommended: dict[str, Any] | None = None
        self.race: Race | None = None
        self.complete = False
        out = Path(cfg.out_dir)
        self.log_dir = None if cfg.verbose else out / "logs"
        self.workdir = make_temp_dir("compare")  # named after this process: a killed run's is removed next time
        self.spawned: list[Worker] = []
        self.stopping = False
        self.seconds = StageSeconds()
        self.linter: Worker | None = None
        """The reference worker while it lints the model, beside the variants."""
        self.lint: dict[str, Any] | None = None

    # -- bookkeeping ---------------------------------------------------------------------
    def tick(self, text: str, steps: int = 1) -> None:
        self.done += steps
        self.progress(min(self.done, self.steps), self.steps, text)

    def status(self, text: str) -> None:
        self.progress(self.done, self.steps, text)

    def report(self) -> dict[str, Any]:
        ref = self.reference
        return {
            "model": self.cfg.model, "plan": self.plan.name, "data": self.cfg.data, "threads": self.cfg.threads,
            "rounds": self.cfg.rounds, "iterations": self.cfg.iterations, "complete": self.complete,
            "accuracy_samples": ref.samples if ref else None, "labelled": ref.labelled if ref else None,
            "reference_variant": self.reference_name,
            "policy": self.cfg.policy.to_json(ref.task["name"] if ref and ref.task else None),
            "recommended": self.recommended, "peak_memory_mb_total": self.timing_memory.peak_mb or None,
            "timing_memory": self.timing_memory.to_json() if self.timing_memory.processes else None,
            "lint": self.lint, "reference_warning": ref.warning if ref else None,
            "reference_failure": self.reference_failure, "task": ref.task if ref else None,
            "racing": self.race.record.to_json() if self.race else None, "stage_seconds": self.seconds.to_json(),
            "variants": [r.to_json() for r in self.results.values()],
        }

    def save(self) -> None:
        self.update(self.report())

    def spawn(self, job: Job) -> Worker:
        if self.stopping:
            raise StageFailure(Outcome.INTERRUPTED, "start", "the run was stopped before this variant started")
        worker = Worker(job, on_start=self.spawned.append)
        if self.stopping:  # stopped while this one started (on the export thread): it must not outlive the run
            worker.kill()
            raise StageFailure(Outcome.INTERRUPTED, "start", "the run was stopped before this variant started")
        return worker

    def job(self, kind: str, variant: dict, artifact: str | None = None) -> Job:
        cfg = self.cfg
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = str(self.log_dir / f"{variant['name']}-{kind}.log")
            Path(log).unlink(missing_ok=True)
        return Job(kind=kind, model=cfg.model, variant=variant, input_specs=[s.to_json() for s in cfg.input_specs],
                   data=cfg.data, calibration=cfg.calibration, out_dir=str(Path(cfg.out_dir) / "artifacts"),
                   threads=cfg.threads, accuracy_samples=cfg.accuracy_samples,
                   reference_path=str(self.workdir / "reference.pt"), log_path=log, target=cfg.target,
                   input_names=list(cfg.input_names) or None, bound_args=dict(cfg.bound_args),
                   artifact=artifact, trust_pickle=cfg.trust_pickle, metric=cfg.metric,
                   task=self.reference.task["name"] if self.reference and self.reference.task else cfg.task,
                   inputs_path=str(self.workdir / "inputs.npz"),
                   timing_bundle=str(self.workdir / f"{variant['name']}-timing.pt") if kind == "run" else None)

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        try:
            self._reference()
            self._variants()
            self._lint()
            t0 = time.monotonic()
            self._rounds()
            self.seconds.timed_rounds_s = time.monotonic() - t0
            self._finish()
            if self.cfg.verify_on:
                self._verify_on()
            self.seconds.finish()
            self.complete = True
            self.save()
            return self.report()
        except BaseException:
            self.stopping = True  # the build thread starts no new process from here on
            for w in list(self.spawned):  # Ctrl-C reaches the workers too, SIGTERM only this process: stop them now
                w.kill()
            for r in self.results.values():
                if r.outcome in (Outcome.RUNNING, Outcome.PENDING):
                    r.fail(Outcome.INTERRUPTED, r.stage or "start", "the run was stopped before this variant finished")
            if self.reference is not None:
                self.save()  # the report on disk says which variants were cut off, never "RUNNING"
            raise
        finally:
            for w in self.workers.values():
                w.stop()
            if self.host is not None:
                self.host.stop()
            shutil.rmtree(self.workdir, ignore_errors=True)
            remove_stale(self.cfg.out_dir)  # half-written files of workers that were killed

    def _reference(self) -> None:
        self.status("float reference: build the model once, run it on the accuracy samples")
        ref = self.spawn(self.job("reference", {"name": "reference"}))
        try:
            self.reference = ref.expect(ReferenceDone, self.cfg.timeout_s)
        except StageFailure as exc:
            self.seconds.worker("reference", "reference", ref.seconds)  # into the report saved below
            ref.finish()
            hint = None
            if exc.outcome == Outcome.TIMEOUT:
                hint = f"try --timeout {max(60, round(4 * self.cfg.timeout_s))}; it was {self.cfg.timeout_s:g} s per stage"
            self.reference_failure = {"stage": exc.stage, "outcome": str(exc.outcome), "message": exc.message,
                                      "timeout_s": self.cfg.timeout_s, "hint": hint}
            self.save()  # the folder keeps its logs and a report saying what failed
            if exc.internal:
                raise InternalError(f"the float reference failed: {exc.message}") from None
            raise ReferenceFailed(f"the float reference failed: {exc.message}", outcome=exc.outcome, stage=exc.stage,
                                  hint=hint) from None
        except BaseException:
            ref.kill()  # interrupted: do not wait for it
            raise
        finally:
            self.seconds.worker("reference", "reference", ref.seconds)
        self.linter = ref  # it lints the model now, while the variants are built and checked
        if self.reference.warning:
            self.status(self.reference.warning)
        self.tick("float reference outputs")

    def _lint(self) -> None:
        """Collect the lint the reference worker made beside the variants; a failure is a note, never a failed run."""
        ref, self.linter = self.linter, None
        if ref is None:
            return
        self.status("lint of the float model")
        try:
            done = ref.expect(LintDone, self.cfg.timeout_s)
            self.lint, error, self.seconds.lint_s = done.lint, done.error, done.seconds
        except StageFailure as exc:
            error = exc.message
        finally:
            ref.finish()
        if error:
            self.results[self.reference_name].note(f"lint: could not analyse the model: {error}")

    def _variants(self) -> None:
        """Load and check the variants in plan order while their exports are built beside, one at a time.

        Exports are mostly single-threaded Python and the checks wait on process start-up, so on two
        cores the overlap cuts the default plan's wall time by about a third; the timed rounds still run
        alone. A variant's ``load_ms``/``first_run_ms`` may be measured while another variant exports."""
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mobilize-export")
        try:
            builds = {v.name: pool.submit(self._build, v) for v in self.variants if v.export}
            for v in self.variants:
                self._variant(v, builds.get(v.name))
                self.save()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)  # interrupted: the running build's process is killed

    def _build(self, v) -> Built:
        """Export one variant in its own process (runs on the export thread; touches no result)."""
        builder = self.spawn(self.job("build", v.to_dict()))
        try:
            return builder.expect(Built, self.cfg.timeout_s)
        except StageFailure:
            raise
        except BaseException:
            builder.kill()
            raise
        finally:
            self.seconds.worker("export", v.name, builder.seconds)
            builder.finish()

    def _variant(self, v, build: concurrent.futures.Future | None) -> None:
        r = self.results[v.name]
        r.outcome = Outcome.RUNNING
        built: Built | None = None
        try:
            if build is not None:
                if not build.done():
                    self.status(f"{v.name}: export")
                built = build.result()
                r.artifact, r.format, r.size_bytes, r.kind = built.artifact, built.format, built.size_bytes, built.kind
                for n in built.notes:
                    r.note(n)
                r.details.update(built.details)
                r.fidelity = built.fidelity
                self.tick(f"{v.name}: exported")
            self.status(f"{v.name}: load and accuracy")
            w = self.spawn(self.job("run", v.to_dict(), built.artifact if built else None))
            try:
                ready = w.expect(Ready, self.cfg.timeout_s)
            finally:
                self.seconds.worker("check", v.name, w.seconds)
            self._ready(r, ready)
            if ready.measures_latency:
                self.workers[v.name] = self._timer(v, r, w, built.artifact if built else None, ready)
            else:
                w.stop()
                r.on_device_only = True
                r.note(f"latency: on device only ({ready.runtime} checks the numbers on this host; it does not "
                       f"time the real runtime)")
            self.tick(f"{v.name}: loaded, accuracy measured ({r.outcome})")
        except StageFailure as exc:
            if exc.internal:
                r.note(f"a bug in mobilize, not in this variant: {exc.message}")
            r.fail(exc.outcome, exc.stage, exc.message)
            self.tick(f"{v.name}: {exc.outcome}", steps=2 if (v.export and built is None) else 1)

    def _timer(self, v, r: VariantResult, checked: Worker, artifact: str | None, ready: Ready):
        """The worker that times ``v``: for a file whose runtime needs no torch, a lean one that loads only that
        runtime; else the shared timing host (the torch worker that checked it stops), or, when the variant cannot
        be hosted, that torch worker."""
        if artifact is None or not lean_runtime(r.runtime):
            return self._hosted(v, r, checked, ready)
        checked.stop()
        self.status(f"{v.name}: lean timing worker")
        lean = self.spawn(self.job("time", v.to_dict(), artifact))
        try:
            ready = lean.expect(TimerReady, self.cfg.timeout_s)
        finally:
            self.seconds.worker("timer", v.name, lean.seconds)
        r.details.update(timing_worker="lean", timing_worker_torch_loaded=ready.torch_loaded)
        return lean

    def _hosted(self, v, r: VariantResult, checked: Worker, ready: Ready):
        why = ready.hostable
        if why == "":
            if self.host is None or self.host.death is not None:
                self.host = TimingHost(self.spawn(self.job("time-host", {"name": "timing-host"})))
            self.status(f"{v.name}: into the shared timing host")
            t0 = time.monotonic()
            try:
                hosted, _ = self.host.open(v.name, checked.job, self.cfg.timeout_s)
            except StageFailure as exc:
                why = f"the shared timing host could not load it: {exc.message}"
            else:
                checked.stop()
                r.details["timing_worker"] = "host"
                return hosted
            finally:
                self.seconds.worker("timer", v.name, {"load": time.monotonic() - t0})
        r.details["timing_worker"] = "torch"
        if why:
            r.note(f"timing: in its own torch process ({why})")
        return checked

    def _ready(self, r: VariantResult, ready: Ready) -> None:
        r.runtime, r.format = ready.runtime, r.format or ready.format
        r.kind = r.kind or ready.kind or str(Kind.FLOAT)
        r.load_ms, r.first_run_ms = ready.load_ms, ready.first_run_ms
        for n in ready.notes:
            r.note(n)
        r.details.update(ready.details)
        if r.size_bytes is None:
            r.size_bytes = ready.size_bytes
        c = ready.comparison
        policy, ref = self.cfg.policy, self.reference
        fidelity = r.fidelity and Verdict(Outcome(r.fidelity["outcome"]), r.fidelity["rule"], r.fidelity["reason"],
                                          r.fidelity["numbers"])
        assessment = assess(c, r.kind, policy, reference_correct=ref.correct, fidelity=fidelity or None,
                            reference_warning=ref.warning)
        acc, verdict = {**c.to_json(), **assessment.accuracy_json()}, assessment.verdict
        r.accuracy, r.verdict = acc, verdict.to_json()
        r.outcome = verdict.outcome
        r.stage = "accuracy" if verdict.outcome == Outcome.MISMATCH else None
        if verdict.outcome != Outcome.OK:
            r.note(f"{verdict.outcome}: {verdict.reason}")

    def _rounds(self) -> None:
        cfg = self.cfg
        per_round = max(1, cfg.iterations // cfg.rounds)

        def run_round(name: str, n: int):
            w = self.workers[name]
            w.send(Bench(n, ROUND_WARMUP_RUNS, ROUND_WARMUP_S))
            try:
                msg = w.expect(Times, cfg.timeout_s)
            except StageFailure as exc:
                self.results[name].fail(exc.outcome, "bench", exc.message)
                self.workers.pop(name).kill()
                return None
            self.results[name].peak_rss_mb = msg.rss_mb
            return msg.times_ns, msg.total_ns

        ticked = 0

        def after_round(i: int) -> None:
            nonlocal ticked
            self.timing_memory.sample(self.workers)
            if ticked < cfg.rounds:
                ticked += 1
                self.tick(f"timed round {i + 1}/{cfg.rounds}")
            else:
                self.status(f"racing: round {i + 1}, {len(self.race.alive)} variant(s) within noise of the leader")
            self.save()

        if self.workers:
            self.status("warm-up")
        ok = [n for n in self.workers if self.results[n].outcome == Outcome.OK]
        self.race = Race(list(self.workers), ok, cfg.rounds, cfg.time_budget_s)
        timed = schedule(list(self.workers), run_round, cfg.rounds, per_round, warmup=3, after_round=after_round,
                         race=self.race)
        for name, rt in timed.items():
            r = self.results[name]
            if rt.times_ns:
                r.latency = rt.stats().to_json()
                r.latency_ms_round_medians = rt.round_medians_ms
                r.round_spread_percent = spread_percent(rt.round_medians_ms)
        if ticked < cfg.rounds:
            self.tick("timed rounds done", steps=cfg.rounds - ticked)

    def _verify_on(self) -> None:
        """Every file's accuracy check again on arm64 kernels (same samples, reference and Policy)."""
        import torch

        from mobilize.arm64.compare import verify_variants
        from mobilize.compare.worker import accuracy_set

        xs, ys = accuracy_set(self.job("arm64", {"name": "reference"}))
        reference = torch.load(self.workdir / "reference.pt", weights_only=True)
        verify_variants(self.results, xs, ys, reference, policy=self.cfg.policy, cpu=self.cfg.arm64_cpu,
                        timeout_s=self.cfg.timeout_s, log_dir=self.log_dir, status=self.status, save=self.save)

    def _finish(self) -> None:
        """Speed-ups against the reference variant with their intervals, and the recommendation."""
        ref = self.results.get(self.reference_name)
        for r in self.results.values():
            if ref is not None and ref.latency_ms_round_medians and r.latency_ms_round_medians:
                ci = ratio_ci(ref.latency_ms_round_medians, r.latency_ms_round_medians)
                r.speedup = {**ci.to_json(), "reference": self.reference_name}
        self.recommended = recommend(list(self.results.values()), self.race.record if self.race else None)


def recommend(results: list[VariantResult], race: RaceRecord | None) -> dict[str, Any] | None:
    """The race's leader (:mod:`mobilize.bench.racing`), or the OK variant with the lowest geometric mean of its
    round medians when there was no race; the candidates still within noise when the time budget ran out make
    a tie (all named); a separated leader is explained by the last variant it raced itself.  Every ratio and
    interval here is the race's one estimator."""
    ok = {r.name: r for r in results if r.outcome == Outcome.OK and r.latency_ms_round_medians}
    if not ok:
        return None
    leader = race.leader if race is not None and race.leader in ok else None
    best = ok[leader] if leader else min(ok.values(), key=lambda r: geometric_mean(r.latency_ms_round_medians))
    tied = [n for n in (race.tied if race is not None else []) if n in ok]
    others = {n: ratio_ci(r.latency_ms_round_medians, best.latency_ms_round_medians)
              for n, r in ok.items() if n != best.name}
    budget = (best.verdict or {}).get("reason", "")
    rounds = len(best.latency_ms_round_medians)
    at = f"{best.latency_ms_p50:.2f} ms p50" if best.latency_ms_p50 else "no p50"
    raced = f"after {rounds} paired rounds" + (f" ({race.spent()})" if race is not None else "")
    if tied:
        first = others[tied[0]]
        reason = (f"fastest OK variant at {at}, but {raced} still within noise of {', '.join(tied)} "
                  f"({best.name} is {first.ratio:.2f}x as fast as {tied[0]}, 95% CI {first.low:.2f}-{first.high:.2f} "
                  f"includes 1): a tie [rule race-tie]")
    elif race is not None and (last := _last_separated(race, best.name)) is not None:
        earlier = [d.name for d in race.dropped if d.rule == "race-separated" and d is not last]
        reason = (f"fastest OK variant at {at}; {last.ratio:.2f}x as fast as {last.name}, the closest variant it "
                  f"raced to the end (95% CI {last.low:.2f}-{last.high:.2f}, {last.after_round} paired rounds) "
                  f"[rule race-separated]")
        if earlier:
            reason += (f"; {len(earlier)} other(s) dropped as slower beyond noise than the leader of their round "
                       f"(report.json racing.dropped)")
    elif others:
        name, ci = min(others.items(), key=lambda kv: kv[1].ratio)
        reason = (f"fastest OK variant at {at}; {ci.ratio:.2f}x as fast as the next, {name} (95% CI "
                  f"{ci.low:.2f}-{ci.high:.2f}, {ci.rounds} paired rounds) [rule race-separated]")
    else:
        reason = f"the only OK variant timed ({at})"
    return {"name": best.name, "reason": reason, "tied": tied, "verdict": budget,
            "estimator": race.estimator if race is not None else ESTIMATOR}


def _last_separated(race: RaceRecord, leader: str):
    """The race's decisive comparison: the last variant dropped as slower beyond noise than ``leader`` itself
    (of several dropped in that round, the closest).
    Comparing the leader with every other OK variant over all their rounds would mix in variants dropped
    early against another leader, over the few rounds they shared (seen: "0.97x as fast as the next ... 5
    paired rounds" under a race-separated verdict)."""
    mine = [d for d in race.dropped if d.rule == "race-separated" and d.against == leader and d.ratio is not None]
    return max(mine, key=lambda d: (d.after_round, -d.ratio)) if mine else None


def run_plan(cfg: CompareConfig, plan, progress: Progress | None = None,
             on_update: Callable[[dict], None] | None = None) -> dict[str, Any]:
    return PlanRun(cfg, plan, progress, on_update).run()
