"""``sweep(models, plan, config)``: compare every model, one report each, plus an index.

Results are written as they arrive (``DIR/<model>/report.json`` by compare, ``DIR/<model>/sweep.json``
and the index when the model finishes); ``resume=True`` keeps every model whose key (model, input
dims, variants, plan, data, compare settings, hardware fingerprint, package versions) already has
a result and runs only the rest.
"""

from __future__ import annotations

import dataclasses
import platform
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from mobilize.compare.config import CompareConfig
from mobilize.core.errors import ConfigError, MobilizeError
from mobilize.sweep.fingerprint import digest, fingerprint_id, host_fingerprint
from mobilize.sweep.index import load_entry, save_entry, write_index
from mobilize.sweep.jobs import ModelEntry, ModelJob, ModelStatus, assign_stems

Progress = Callable[[int, int, str], None]


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    out_dir: str = "out/sweep"
    executor: str = "local"
    """``local`` (one model after the other, in this process) or ``ray`` / ``ray:ADDRESS``."""
    resume: bool = False
    """Keep models whose key already has a result in ``out_dir``; run only the rest."""
    max_retries: int = 2
    """Ray: how often a model whose worker or node was lost is tried again."""
    compare: CompareConfig = CompareConfig()
    """Every model's compare settings (data, threads, iterations, rounds, samples, timeout, target, Policy); each
    model fills in its own reference, inputs and output folder."""

    def settings(self) -> dict[str, Any]:
        """The compare settings that change a result (part of the resume key)."""
        c = self.compare
        return {"iterations": c.iterations, "rounds": c.rounds, "accuracy_samples": c.accuracy_samples,
                "target": c.target, "threads": c.threads}

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SweepConfig":
        """The inverse of :meth:`to_json` (a Ray worker gets the config as JSON)."""
        from mobilize.accuracy.verify import Policy

        compare = dict(data.get("compare") or {})
        if isinstance(compare.get("policy"), dict):
            compare["policy"] = Policy(**compare["policy"])
        compare["input_specs"] = tuple(compare.get("input_specs") or ())
        compare["input_names"] = tuple(compare.get("input_names") or ())
        compare["devices"] = tuple(compare.get("devices") or ())
        return cls(**{**data, "compare": CompareConfig(**compare)})


def work_key(job: ModelJob, plan_dict: dict[str, Any], cfg: SweepConfig) -> str:
    return digest({"job": job.to_json(), "plan": plan_dict, "data": cfg.compare.data, "settings": cfg.settings()}, 16)


def run_job(job: ModelJob, plan_dict: dict[str, Any], cfg: SweepConfig, out_dir: Path,
            progress: Progress | None = None) -> ModelEntry:
    """Run one model's compare where this is called; failures of the model become a FAILED entry."""
    from mobilize.compare.entry import compare
    from mobilize.plans.plan import Plan
    from mobilize.core.inputs import parse_input_specs

    entry = ModelEntry(job.reference, job.stem, job.to_json(), work_key(job, plan_dict, cfg),
                       status=ModelStatus.RUNNING, fingerprint=host_fingerprint(cfg.compare.threads), node=platform.node(),
                       attempts=1)
    start = time.monotonic()
    try:
        specs = tuple(parse_input_specs(job.input_dims, job.input_type)) if job.input_dims else ()
        ccfg = dataclasses.replace(cfg.compare, model=job.reference, input_specs=specs, out_dir=str(out_dir / job.stem))
        report = compare(job.reference, Plan.from_dict(plan_dict, plan_dict.get("name", "custom")), ccfg,
                         progress=progress)
        entry.status = ModelStatus.DONE
        entry.fill_from_report(report)
        entry.report = f"{job.stem}/report.html"
    except MobilizeError as exc:  # anything else escaping compare is a bug in mobilize: the CLI says so, exit 1
        entry.status, entry.error = ModelStatus.FAILED, str(exc)
    entry.duration_s = time.monotonic() - start
    return entry


class Tracker:
    """Progress across the sweep: ``progress(models finished in this run, models to run, text)``, the text
    counting every model of the sweep (done, running, failed); the caller's progress adds the ETA."""

    def __init__(self, entries: list[ModelEntry], progress: Progress | None, to_run: int):
        self.entries, self.progress, self.to_run = entries, progress, to_run
        self.finished = 0

    def counts(self) -> tuple[int, int, int]:
        done = sum(e.status.is_result for e in self.entries)
        running = sum(e.status == ModelStatus.RUNNING for e in self.entries)
        failed = sum(e.status == ModelStatus.FAILED for e in self.entries)
        return done, running, failed

    def __call__(self, text: str) -> None:
        if self.progress is None:
            return
        done, running, failed = self.counts()
        self.progress(self.finished, self.to_run,
                      f"models {done}/{len(self.entries)} done, {running} running, {failed} failed · {text}")


class LocalExecutor:
    """One model after the other in this process (compare isolates each variant in its own processes)."""

    name = "local"
    parallel = 1

    def fingerprints(self, cfg: SweepConfig) -> list[dict[str, Any]]:
        return [host_fingerprint(cfg.compare.threads)]

    def run(self, todo: list[tuple[ModelJob, ModelEntry]], plans: dict[str, dict], cfg: SweepConfig, out: Path,
            started: Callable[[ModelEntry], None], finished: Callable[[ModelEntry, ModelEntry], None],
            status: Callable[[str], None]) -> None:
        for job, entry in todo:
            started(entry)
            try:
                result = run_job(job, plans[job.stem], cfg, out,
                                 progress=lambda d, t, text, s=job.stem: status(f"{s}: {text}"))
            except KeyboardInterrupt:
                entry.status = ModelStatus.INTERRUPTED
                finished(entry, entry)
                raise
            finished(entry, result)

    def close(self) -> None:
        pass


def make_executor(spec: str, cfg: SweepConfig):
    name, _, address = spec.partition(":")
    if name == "local" and not address:
        return LocalExecutor()
    if name == "ray":
        from mobilize.sweep.ray_executor import RayExecutor

        return RayExecutor(address or None, cfg)
    raise ConfigError(f"unknown executor '{spec}'", hint="use local, ray or ray:ADDRESS (e.g. ray:10.0.0.5:6379)")


def as_jobs(models: Iterable[str | ModelJob]) -> list[ModelJob]:
    jobs = [m if isinstance(m, ModelJob) else ModelJob(m) for m in models]
    if not jobs:
        raise ConfigError("no models to sweep", hint="give MODEL arguments or --models FILE")
    return assign_stems(jobs)


def sweep(models: Sequence[str | ModelJob], plan: Any = "default", config: SweepConfig = SweepConfig(), *,
          progress: Progress | None = None, executor: Any = None) -> dict[str, Any]:
    """Compare every model with ``plan``; returns the index (also written to ``out_dir/index.json``)."""
    from mobilize.core.paths import check_output_dir
    from mobilize.plans.plan import Plan, load_plan

    cfg = config
    if cfg.compare.iterations < 1 or cfg.compare.rounds < 1 or cfg.compare.accuracy_samples < 1:
        raise ConfigError("--iter, --rounds and --accuracy-samples must be at least 1")
    plan = plan if isinstance(plan, Plan) else load_plan(plan)
    jobs = as_jobs(models)
    plans = {j.stem: (plan.select(list(j.variants)) if j.variants else plan).to_dict() for j in jobs}
    out = check_output_dir(cfg.out_dir)
    executor = executor or make_executor(cfg.executor, cfg)
    meta = {"plan": plan.name, "data": cfg.compare.data, "executor": cfg.executor, "settings": cfg.settings()}
    try:
        known = {fingerprint_id(fp) for fp in executor.fingerprints(cfg)}
        entries, todo = [], []
        for job in jobs:
            key = work_key(job, plans[job.stem], cfg)
            prev = load_entry(out / job.stem / "sweep.json") if cfg.resume else None
            if (prev is not None and prev.status.is_result and prev.work_key == key and prev.fingerprint
                    and fingerprint_id(prev.fingerprint) in known):
                entries.append(prev)
                continue
            entry = ModelEntry(job.reference, job.stem, job.to_json(), key)
            entries.append(entry)
            todo.append((job, entry))
        tracker = Tracker(entries, progress, len(todo))
        write_index(entries, meta, out)
        skipped = len(entries) - len(todo)
        tracker(f"{skipped} model(s) already have a result, {len(todo)} to run" if cfg.resume else "start")

        def started(entry: ModelEntry) -> None:
            entry.status = ModelStatus.RUNNING
            write_index(entries, meta, out)
            tracker(f"{entry.stem}: started")

        def finished(entry: ModelEntry, result: ModelEntry) -> None:
            if result is not entry:
                entries[next(i for i, e in enumerate(entries) if e is entry)] = result
            tracker.finished += 1
            save_entry(result, out / result.stem / "sweep.json")
            write_index(entries, meta, out)
            tracker(f"{result.stem}: {result.status}")

        try:
            executor.run(todo, plans, cfg, out, started, finished, tracker)
        finally:
            for e in entries:
                if not e.status.is_result and e.status != ModelStatus.PENDING:
                    e.status = ModelStatus.INTERRUPTED
            write_index(entries, meta, out)
    finally:
        executor.close()
    from mobilize.sweep.index import index_json

    return index_json(entries, meta)
