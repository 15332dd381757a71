"""The variants' stage of a compare run: each variant exported in its own process (on one export thread, beside
the checks), then loaded and checked for accuracy in another, its verdict recorded, and the worker that will time
it chosen (a lean one, the shared timing host, or the torch worker that checked it)."""

from __future__ import annotations

import concurrent.futures
import time
from typing import TYPE_CHECKING

from mobilize.accuracy.verify import Kind, Verdict, assess
from mobilize.compare.failures import StageFailure
from mobilize.compare.host import TimingHost
from mobilize.compare.messages import Built, Ready, TimerReady
from mobilize.compare.timing import lean_runtime
from mobilize.compare.worker_handle import Worker
from mobilize.core.outcome import Outcome
from mobilize.report.results import TokenFigures, VariantResult

if TYPE_CHECKING:
    from mobilize.compare.plan_run import PlanRun


def check_variants(run: PlanRun) -> None:
    """Load and check the variants in plan order while their exports are built beside, one at a time.

    Exports are mostly single-threaded Python and the checks wait on process start-up, so on two
    cores the overlap cuts the default plan's wall time by about a third; the timed rounds still run
    alone. A variant's ``load_ms``/``first_run_ms`` may be measured while another variant exports. Files whose
    tool is slow (``slow_build``: minutes at a real size) are built and checked after the others, so the quick
    files' checks run beside them (the report keeps the plan's order)."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mobilize-export")
    order = sorted(run.variants, key=lambda v: bool(getattr(v, "slow_build", False)))  # stable: plan order else
    try:
        builds = {v.name: pool.submit(_build, run, v) for v in order if v.export}
        for v in order:
            _check(run, v, builds.get(v.name))
            run.save()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # interrupted: the running build's process is killed
    if run.decoding is not None:
        name_sibling_errors(run)


def name_sibling_errors(run: PlanRun) -> None:
    """A quantized decoder file whose tool's float file is MISMATCH in this run carries that export error
    (:func:`mobilize.accuracy.decoder_verdict.judge_siblings`): it is MISMATCH before the race, so it is neither
    raced nor recommended."""
    from mobilize.accuracy.decoder_verdict import judge_siblings

    siblings = {v.name: v.variant.float_sibling for v in run.variants
                if getattr(getattr(v, "variant", None), "float_sibling", None)}
    verdicts = {name: r.verdict for name, r in run.results.items() if r.verdict}
    for name, verdict in judge_siblings(verdicts, siblings).items():
        r = run.results[name]
        r.verdict, r.outcome, r.stage = verdict.to_json(), verdict.outcome, "accuracy"
        r.note(f"{verdict.outcome}: {verdict.reason}")


def check_one(run: PlanRun, v) -> None:
    """Build one variant, then load and check it, before the next is started (tune's decoder ladder climbs one rung
    at a time: whether the next is built depends on this one's verdict)."""
    build: concurrent.futures.Future = concurrent.futures.Future()
    if v.export:
        try:
            build.set_result(_build(run, v))
        except StageFailure as exc:
            build.set_exception(exc)
    _check(run, v, build if v.export else None)
    run.save()


def _build(run: PlanRun, v) -> Built:
    """Export one variant in its own process (runs on the export thread; touches no result)."""
    builder = run.spawn(run.job("build", v.to_dict()))
    try:
        return builder.expect(Built, run.cfg.timeout_s)
    except StageFailure:
        raise
    except BaseException:
        builder.kill()
        raise
    finally:
        run.seconds.worker("export", v.name, builder.seconds)
        builder.finish()


def _check(run: PlanRun, v, build: concurrent.futures.Future | None) -> None:
    r = run.results[v.name]
    r.outcome = Outcome.RUNNING
    built: Built | None = None
    try:
        if build is not None:
            if not build.done():
                run.status(f"{v.name}: export")
            built = build.result()
            r.artifact, r.format, r.size_bytes, r.kind = built.artifact, built.format, built.size_bytes, built.kind
            for n in built.notes:
                r.note(n)
            r.details.update(built.details)
            r.fidelity = built.fidelity
            run.tick(f"{v.name}: exported")
        run.status(f"{v.name}: load and accuracy")
        w = run.spawn(run.job("run", v.to_dict(), built.artifact if built else None))
        try:
            ready = w.expect(Ready, run.cfg.timeout_s)
        finally:
            run.seconds.worker("check", v.name, w.seconds)
        _record_ready(run, r, ready)
        if ready.measures_latency:
            run.workers[v.name] = _timer(run, v, r, w, built.artifact if built else None, ready)
        else:
            w.stop()
            r.on_device_only = True
            r.note(f"latency: on device only ({ready.runtime} checks the numbers on this host; it does not "
                   f"time the real runtime)")
        run.tick(f"{v.name}: loaded, accuracy measured ({r.outcome})")
    except StageFailure as exc:
        if exc.internal:
            r.note(f"a bug in mobilize, not in this variant: {exc.message}")
        r.fail(exc.outcome, exc.stage, exc.message)
        run.tick(f"{v.name}: {exc.outcome}", steps=2 if (v.export and built is None) else 1)


def _timer(run: PlanRun, v, r: VariantResult, checked: Worker, artifact: str | None, ready: Ready):
    """The worker that times ``v``: for a file whose runtime needs no torch, a lean one that loads only that
    runtime; else the shared timing host (the torch worker that checked it stops), or, when the variant cannot
    be hosted, that torch worker."""
    if artifact is None or run.decoding is not None or not lean_runtime(r.runtime):  # decoders share the host
        return _hosted(run, v, r, checked, ready)
    checked.stop()
    run.status(f"{v.name}: lean timing worker")
    lean = run.spawn(run.job("time", v.to_dict(), artifact))
    try:
        ready = lean.expect(TimerReady, run.cfg.timeout_s)
    finally:
        run.seconds.worker("timer", v.name, lean.seconds)
    r.details.update(timing_worker="lean", timing_worker_torch_loaded=ready.torch_loaded)
    return lean


def _hosted(run: PlanRun, v, r: VariantResult, checked: Worker, ready: Ready):
    why = ready.hostable
    if why == "":
        if run.host is None or run.host.death is not None:
            # the host forks from the server with transformers when it will hold a file whose session runs it
            loads = any(step.to_dict().get("loads_transformers") for step in run.variants)
            run.host = TimingHost(run.spawn(run.job("time-host", {"name": "timing-host", "loads_transformers": loads})))
        run.status(f"{v.name}: into the shared timing host")
        t0 = time.monotonic()
        try:
            hosted, _ = run.host.open(v.name, checked.job, run.cfg.timeout_s)
        except StageFailure as exc:
            why = f"the shared timing host could not load it: {exc.message}"
        else:
            checked.stop()
            r.details["timing_worker"] = "host"
            return hosted
        finally:
            run.seconds.worker("timer", v.name, {"load": time.monotonic() - t0})
    r.details["timing_worker"] = "torch"
    if why:
        r.note(f"timing: in its own torch process ({why})")
    return checked


def _record_ready(run: PlanRun, r: VariantResult, ready: Ready) -> None:
    """What the checking worker measured, into the variant's result, with its verdict from the verify core."""
    r.runtime, r.format = ready.runtime, r.format or ready.format
    r.kind = r.kind or ready.kind or str(Kind.FLOAT)
    r.load_ms, r.first_run_ms = ready.load_ms, ready.first_run_ms
    for n in ready.notes:
        r.note(n)
    r.details.update(ready.details)
    if r.size_bytes is None:
        r.size_bytes = ready.size_bytes
    c = ready.comparison
    policy, ref = run.cfg.policy, run.reference
    fidelity = r.fidelity and Verdict(Outcome(r.fidelity["outcome"]), r.fidelity["rule"], r.fidelity["reason"],
                                      r.fidelity["numbers"])
    assessment = assess(c, r.kind, policy, reference_correct=ref.correct, fidelity=fidelity or None,
                        reference_warning=ref.warning)
    acc, verdict = {**c.to_json(), **assessment.accuracy_json()}, assessment.verdict
    r.accuracy, r.verdict = acc, verdict.to_json()
    if c.task == "generation":
        r.tokens = TokenFigures.checked(r.details, c)
    r.outcome = verdict.outcome
    r.stage = "accuracy" if verdict.outcome == Outcome.MISMATCH else None
    if verdict.outcome != Outcome.OK:
        r.note(f"{verdict.outcome}: {verdict.reason}")
