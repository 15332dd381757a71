"""Run a plan: each variant in its own processes (build, then load + accuracy), interleaved timed
rounds, every failure recorded with its stage, verdicts from the verify core, results written
after every step so Ctrl-C keeps them.

:class:`PlanRun` holds one run's state and runs its stages in order: the float reference
(:mod:`~mobilize.compare.reference`), the variants (:mod:`~mobilize.compare.variants`), the timed rounds and race
(here), the recommendation (:mod:`~mobilize.compare.recommend`).
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from mobilize.accuracy.stats import ratio_ci, spread_percent
from mobilize.bench.harness import ROUND_WARMUP_RUNS, ROUND_WARMUP_S
from mobilize.bench.load import LoadWatch
from mobilize.bench.racing import Race
from mobilize.bench.rounds import RoundTimes, schedule
from mobilize.camera.loop import FrameTiming
from mobilize.compare.config import CompareConfig, Progress
from mobilize.compare.failures import StageFailure
from mobilize.compare.host import TimingHost
from mobilize.compare.memory import TimingMemory
from mobilize.compare.messages import Bench, Job, ReferenceDone, Times
from mobilize.compare.recommend import recommend
from mobilize.compare.reference import collect_lint, run_reference
from mobilize.compare.stages import StageSeconds
from mobilize.compare.variants import check_variants
from mobilize.compare.worker_handle import Worker
from mobilize.core.errors import InternalError
from mobilize.core.outcome import Outcome

FAILED = (Outcome.EXPORT_FAIL, Outcome.LOAD_FAIL, Outcome.RUN_FAIL, Outcome.TIMEOUT, Outcome.INTERRUPTED,
          Outcome.UNSUPPORTED, Outcome.UNAVAILABLE)
"""Outcomes with no time: a variant that failed in the timed rounds keeps none of its earlier rounds."""
from mobilize.core.paths import make_temp_dir, remove_stale
from mobilize.report.results import VariantResult
from mobilize.sources.reference import ModelRef


class PlanRun:
    """One compare run: its results, workers and report; ``run`` executes it."""

    def __init__(self, cfg: CompareConfig, plan, progress: Progress | None, on_update: Callable[[dict], None] | None,
                 ref: ModelRef | None = None, decoding: dict[str, Any] | None = None):
        self.cfg, self.plan = cfg, plan
        self.ref = ref or ModelRef.parse(cfg.model)
        """The model reference, parsed once; every job carries it typed."""
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
        self.devices: dict[str, Any] | None = None
        """``--on``: each device's section (:func:`mobilize.compare.devices.run_on_devices`)."""
        self.budget_summary: dict[str, Any] | None = None
        """``--max-size-mb`` and the other budgets: which files are within them (:func:`mobilize.compare.budgets.apply`)."""
        self.baseline: dict[str, Any] | None = None
        """This run against ``--baseline``'s (:func:`mobilize.compare.baseline.compare_with`)."""
        self.machine_load = None
        """How busy the machine was during the timed rounds (:mod:`mobilize.bench.load`)."""
        self.bandwidth: dict[str, Any] | None = None
        """A decoder run's memory bandwidth read beside the timed rounds (the decode bound's)."""
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
        self.file_times: dict[str, list[int]] = {}
        """Per variant whose file converts: its file-alone times (the second figure, ``latency_ms_p50_file``)."""
        self.file_round_medians: dict[str, list[float]] = {}
        self.warmed: set[str] = set()
        """Variants whose warm-up round came back (their later rounds are kept)."""
        self.frames = FrameTiming(**cfg.frames) if cfg.frames else None
        """``--frames``: the race and the pick are on frame to answer; the plain unit's times are kept beside."""
        self.frames_for_workers: dict | None = None
        self.frame_rounds: dict[str, list] = {}
        self.plain: dict[str, RoundTimes] = {}
        """With ``--frames``: each variant's times on the run's unit (the race ran on its frame-to-answer times)."""
        self.decoding = decoding
        """A causal decoder's run (the ``generation`` task): its lengths and text, as every job reads them
        (:meth:`CompareConfig.decoding`; the reference sets the ones in force); None for every other task."""
        self.prefill_ms: dict[str, list[float]] = {}
        """A decoder's time to the first token, per timed round (the prefill before the round's decode steps)."""

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
            "unit": self.cfg.unit, "call_rows": self._call_rows(),
            "accuracy_samples": ref.samples if ref else None, "labelled": ref.labelled if ref else None,
            "reference_variant": self.reference_name,
            "policy": self.cfg.policy.to_json(ref.task["name"] if ref and ref.task else None),
            "recommended": self.recommended, "peak_memory_mb_total": self.timing_memory.peak_mb or None,
            "timing_memory": self.timing_memory.to_json() if self.timing_memory.processes else None,
            "lint": self.lint, "reference_warning": ref.warning if ref else None,
            "reference_failure": self.reference_failure, "task": ref.task if ref else None,
            "racing": self.race.record.to_json() if self.race else None, "stage_seconds": self.seconds.to_json(),
            "frames": {**self.frames.to_json(), "label": self.frames.label} if self.frames else None,
            "machine_load": self.machine_load.to_json() if self.machine_load else None,
            "generation": self._generation_facts(),
            "variants": [r.to_json() for r in self.results.values()],
            "timed_on_host": self.cfg.timed, "devices": self.devices, "budgets": self.budget_summary,
            "baseline": self.baseline,
        }

    def _call_rows(self) -> int | None:
        """The fixed batch one timed call runs (every input's first dimension), when it is more than one row: the
        times are per call of that many rows, the verdicts per row."""
        from mobilize.accuracy.stream import batch_rows

        rows = batch_rows(self.cfg.input_specs) if self.decoding is None else 1
        return rows if rows > 1 else None

    def _generation_facts(self) -> dict[str, Any] | None:
        """A decoder run's lengths in force and what the reference found (the held-out text, the model's size and
        context, the machine's bandwidth)."""
        if self.decoding is None:
            return None
        facts = dict(self.reference.generation or {}) if self.reference else {}
        if self.bandwidth:
            facts["bandwidth"] = self.bandwidth  # read beside the rounds; the reference stage's one reading in it
        return {**facts, **{k: v for k, v in self.decoding.items() if k not in ("task_given", "task_why")}}

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
        return Job(kind=kind, model=self.ref, variant=variant, input_specs=[s.to_json() for s in cfg.input_specs],
                   data=cfg.data, calibration=cfg.calibration, out_dir=str(Path(cfg.out_dir) / "artifacts"),
                   threads=cfg.threads, accuracy_samples=cfg.accuracy_samples,
                   reference_path=str(self.workdir / "reference.pt"), log_path=log, target=cfg.target,
                   input_names=list(cfg.input_names) or None, bound_args=dict(cfg.bound_args),
                   artifact=artifact, trust_pickle=cfg.trust_pickle, metric=cfg.metric,
                   task=self.reference.task["name"] if self.reference and self.reference.task else cfg.task,
                   inputs_path=str(self.workdir / "inputs.npz"), unit=cfg.unit, frames=self._worker_frames(kind),
                   decoding=self.decoding,
                   timing_bundle=str(self.workdir / f"{variant['name']}-timing.pt") if kind == "run" else None)

    def _worker_frames(self, kind: str) -> dict | None:
        """``--frames`` as the timing workers read it: the synthetic frames drawn once, here, into the run's folder."""
        if self.frames is None or kind not in ("run", "time", "time-torch", "time-host"):
            return None
        if self.frames_for_workers is None:
            from mobilize.camera.loop import write_frames

            self.frames_for_workers = write_frames(self.frames, str(self.workdir / "frames.raw")).to_json()
        return self.frames_for_workers

    # -- the run ---------------------------------------------------------------------------
    def run(self, variants_stage: Callable[["PlanRun"], None] | None = None) -> dict[str, Any]:
        """The stages in order; ``variants_stage`` replaces the variants' stage (tune's decoder ladder builds and
        checks its rungs one at a time, :mod:`mobilize.tune.decoder`)."""
        try:
            with self.seconds.phase("reference"):
                run_reference(self)
            if self.decoding is not None and self.reference.generation:  # the lengths in force for this model
                self.decoding = {**self.decoding, **self.reference.generation.get("settings", {})}
            with self.seconds.phase("variants"):
                (variants_stage or check_variants)(self)
                collect_lint(self)
            t0 = time.monotonic()
            if self.cfg.timed:
                self._rounds()
            self.seconds.timed_rounds_s = time.monotonic() - t0
            self._finish()
            if self.cfg.verify_on:
                with self.seconds.phase("arm64"):
                    self._verify_on()
            if self.cfg.devices:
                with self.seconds.phase("devices"):
                    self._on_devices()
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

    def _rounds(self) -> None:
        """The timed rounds, then the race among the OK variants (:mod:`mobilize.bench.racing`).
        Kept here with the ``schedule`` and ``Race`` it calls: benchmarks/timing_agreement.py replaces ``PlanRun``,
        ``schedule`` and ``Race`` on this module to add its own rounds beside compare's."""
        cfg = self.cfg
        # a decoder's round is one prefill and the generation's decode steps: its unit is one decoded token
        per_round = cfg.gen_tokens if self.decoding is not None else max(1, cfg.iterations // cfg.rounds)

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
            return self._keep(name, msg)

        ticked = 0
        sampler = self._bandwidth_sampler()

        def after_round(i: int) -> None:
            nonlocal ticked
            self.timing_memory.sample(self.workers)
            if ticked < cfg.rounds:
                if sampler is not None:  # the decode bound's bandwidth, read beside the rounds every file ran
                    sampler.sample()
                ticked += 1
                self.tick(f"timed round {i + 1}/{cfg.rounds}")
            else:
                self.status(f"racing: round {i + 1}, {len(self.race.alive)} variant(s) within noise of the leader")
            self.save()

        if self.workers:
            self.status("warm-up")
        ok = [n for n in self.workers if self.results[n].outcome == Outcome.OK]
        self.race = Race(list(self.workers), ok, cfg.rounds, cfg.time_budget_s)
        watch = LoadWatch.start()
        try:
            timed = schedule(list(self.workers), run_round, cfg.rounds, per_round, warmup=3, after_round=after_round,
                             race=self.race)
        finally:
            self._bandwidth_read(sampler)
        self.machine_load = watch.stop() if self.workers or timed else None
        if self.machine_load is not None:
            from mobilize.bench.load import speed_shift

            shift = speed_shift({n: rt.round_medians_ms for n, rt in timed.items() if rt.times_ns})
            self.machine_load = dataclasses.replace(self.machine_load, speed_shift=shift)
        for name, rt in timed.items():
            r = self.results[name]
            if rt.times_ns and r.outcome not in FAILED:  # a variant that failed in the rounds has no time
                self._assign(r, rt)
        if ticked < cfg.rounds:
            self.tick("timed rounds done", steps=cfg.rounds - ticked)

    def _bandwidth_sampler(self) -> Any:
        """A decoder run's bandwidth reader for the rounds (:class:`mobilize.bench.bandwidth.RoundSampler`), or None."""
        if self.decoding is None or not self.workers:
            return None
        from mobilize.bench.bandwidth import RoundSampler

        return RoundSampler(threads=self.cfg.threads)

    def _bandwidth_read(self, sampler: Any) -> None:
        """The rounds' bandwidth readings as the run's (the reference stage's one reading kept beside them)."""
        if sampler is None:
            return
        if sampler.readings:
            shapes = (self.reference.generation or {}).get("shapes")
            for r in self.results.values():  # each file's working set read too: its cache residency is measured
                read = r.tokens.working_set(shapes) if r.tokens is not None else None
                if read and str(read) not in sampler.at_size:
                    sampler.at_size_of(read)
            before = (self.reference.generation or {}).get("bandwidth") or {}
            self.bandwidth = sampler.result(before.get("gb_per_s")).to_json()
        sampler.close()

    def _keep(self, name: str, msg: Times) -> tuple[list[int], int]:
        """What ``schedule`` records of a round (the frame loop's times with ``--frames``: the race runs on them), with
        the figures kept beside it; a variant's first round is its warm-up, whose figures are not kept."""
        warm = name in self.warmed
        self.warmed.add(name)
        if warm and msg.prefill_ns is not None:
            self.prefill_ms.setdefault(name, []).append(msg.prefill_ns / 1e6)
        if warm and msg.file_times_ns:
            self.file_times.setdefault(name, []).extend(msg.file_times_ns)
            self.file_round_medians.setdefault(name, []).append(statistics.median(msg.file_times_ns) / 1e6)
        if self.frames is None:
            return msg.times_ns, msg.total_ns
        if msg.frame is None:
            raise InternalError(f"{name}'s timing worker answered a round without its frame loop")
        if warm:
            plain = self.plain.setdefault(name, RoundTimes())
            plain.times_ns.extend(msg.times_ns)
            plain.total_ns += msg.total_ns
            plain.round_medians_ms.append(statistics.median(msg.times_ns) / 1e6)
            self.frame_rounds.setdefault(name, []).append(msg.frame)
        return msg.frame.times_ns, msg.frame.total_ns

    def _assign(self, r: VariantResult, rt: RoundTimes) -> None:
        """A timed variant's figures: ``rt`` is what ``schedule`` recorded (frame to answer with ``--frames``)."""
        plain = self.plain.get(r.name, RoundTimes()) if self.frames else rt
        r.latency = {**plain.stats().to_json(), **file_alone(plain.times_ns, self.file_times.get(r.name))}
        r.latency_ms_round_medians = plain.round_medians_ms
        r.round_spread_percent = spread_percent(plain.round_medians_ms)
        if r.tokens is not None:
            facts = self.reference.generation or {}
            r.tokens = r.tokens.timed(self.prefill_ms.get(r.name, []), r.latency.get("latency_ms_p50"),
                                      r.latency.get("latency_ms_p90"), self.bandwidth or facts.get("bandwidth") or {},
                                      facts.get("shapes"))
        if self.frames is not None:
            from mobilize.camera.figures import frame_figures

            alone = self.file_round_medians.get(r.name) or plain.round_medians_ms  # the same call: nothing converts
            r.frames = frame_figures(rt.times_ns, rt.total_ns, rt.round_medians_ms, self.frame_rounds.get(r.name, []),
                                     alone)
            check = r.frames["infer_check"]
            if check.get("within") is False:
                r.note(f"frames: {check['reason']} [rule {check['rule']}]")

    def _verify_on(self) -> None:
        """Every file's accuracy check again on arm64 kernels (same samples, reference and Policy)."""
        import torch

        from mobilize.arm64.compare import verify_variants
        from mobilize.compare.worker import accuracy_set

        job = self.job("arm64", {"name": "reference"})
        unlike = _fed_unlike_single_calls(job)
        if unlike:  # the arm64 child runs one call per sample: judging those against this reference would mislead
            for r in self.results.values():
                if r.artifact:
                    r.note(f"arm64: not checked: {unlike}, while the arm64 check runs one call per sample; the host "
                           f"verdict stands")
            return
        xs, ys = accuracy_set(job)
        reference = torch.load(self.workdir / "reference.pt", weights_only=True)
        verify_variants(self.results, xs, ys, reference, policy=self.cfg.policy, cpu=self.cfg.arm64_cpu,
                        timeout_s=self.cfg.timeout_s, log_dir=self.log_dir, status=self.status, save=self.save)

    def _on_devices(self) -> None:
        """Every file checked and timed on each ``--on`` device (:mod:`mobilize.compare.devices`)."""
        import torch

        from mobilize.compare.worker import accuracy_set
        from mobilize.devices import resolve
        from mobilize.compare.devices import run_on_devices

        job = self.job("device", {"name": "reference"})
        unlike = "decoder files are not run on a device yet" if self.decoding is not None else \
            _fed_unlike_single_calls(job)
        if unlike:  # the device child runs one call per sample, as the arm64 one does
            self.devices = {spec: {"failure": f"not run on the device: {unlike}", "variants": {}}
                            for spec in self.cfg.devices}
            return
        xs, ys = accuracy_set(job)
        reference = torch.load(self.workdir / "reference.pt", weights_only=True)
        self.devices = {}
        for spec in self.cfg.devices:
            self.devices.update(run_on_devices(
                [resolve(spec, arm64_cpu=self.cfg.arm64_cpu)], self.results, xs, ys, reference,
                policy=self.cfg.policy, rounds=self.cfg.rounds, iterations=max(1, self.cfg.iterations // self.cfg.rounds),
                threads=self.cfg.threads, timeout_s=self.cfg.timeout_s, unit=self.cfg.unit, log_dir=self.log_dir,
                status=self.status))
            self.save()

    def _finish(self) -> None:
        """Speed-ups against the reference variant with their intervals, and the recommendation."""
        ref = self.results.get(self.reference_name)
        if ref is not None and ref.outcome in FAILED:  # a failed variant is never the baseline: the next timed one is
            stand_in = next((r for r in self.results.values() if r.latency_ms_round_medians and r.outcome not in FAILED),
                            None)
            if stand_in is not None:
                ref.note(f"speed-ups are against {stand_in.name}: {ref.name}, the plan's reference, failed "
                         f"({ref.outcome}) and has no time")
                self.reference_name, ref = stand_in.name, stand_in
        for r in self.results.values():
            if ref is not None and ref.latency_ms_round_medians and r.latency_ms_round_medians:
                ci = ratio_ci(ref.latency_ms_round_medians, r.latency_ms_round_medians)
                r.speedup = {**ci.to_json(), "reference": self.reference_name}
            if ref is not None and ref.frames and r.frames:
                ci = ratio_ci(ref.frames["latency_ms_round_medians"], r.frames["latency_ms_round_medians"])
                r.frames["speedup"] = {**ci.to_json(), "reference": self.reference_name}
        candidates = list(self.results.values())
        if self.cfg.budgets:
            from mobilize.compare.budgets import apply

            self.budget_summary = apply(self.results, self.cfg.budgets)
            candidates = [r for r in candidates if r.name not in self.budget_summary["missed"]]
        self.recommended = recommend(candidates, self.race.record if self.race else None,
                                     self.machine_load, unit=self.cfg.unit,
                                     frames=self.frames.label if self.frames else None)
        if self.cfg.baseline:
            from mobilize.compare.baseline import compare_with

            self.baseline = compare_with(self.cfg.baseline, [r.to_json() for r in self.results.values()],
                                         load_now=self.machine_load.to_json() if self.machine_load else None)
        if self.recommended is not None:
            from mobilize.compare.recommend import pick_caveats

            task = (self.reference.task or {}) if self.reference else {}
            self.recommended.update(pick_caveats(self.results[self.recommended["name"]], task, self.cfg.data))


def file_alone(times_ns: list[int], file_times_ns: list[int] | None) -> dict[str, Any]:
    """The file-alone figure beside the timed unit's: its own loop's median where the file converts, else the same
    call's (the two units are one call for a file that takes the reference's float tensors)."""
    import statistics

    times = file_times_ns or times_ns
    return {"latency_ms_p50_file": statistics.median(times) / 1e6 if times else None,
            "latency_file_same_call": not file_times_ns}


def run_plan(cfg: CompareConfig, plan, progress: Progress | None = None,
             on_update: Callable[[dict], None] | None = None, ref: ModelRef | None = None,
             decoding: dict[str, Any] | None = None) -> dict[str, Any]:
    return PlanRun(cfg, plan, progress, on_update, ref, decoding).run()


def _fed_unlike_single_calls(job: Any) -> str | None:
    """Why this model's accuracy is not judged on single calls (a stateful model's stream, a batch judged row by
    row), or None."""
    from mobilize.accuracy.stream import batch_rows
    from mobilize.compare.worker import _specs, accuracy_stream

    if accuracy_stream(job):
        return "this model is stateful and judged over a stream with its state carried"
    rows = batch_rows(_specs(job))
    return f"this model's batch of {rows} is judged row by row" if rows > 1 else None
