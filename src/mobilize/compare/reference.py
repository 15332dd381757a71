"""The float reference's stage of a compare run: one worker builds the model once and runs it on the accuracy
samples (every variant is judged against its outputs), then lints the model while the variants are checked.
A failed reference ends the run; a failed lint is a note."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mobilize.compare.failures import ReferenceFailed, StageFailure
from mobilize.compare.messages import LintDone, ReferenceDone
from mobilize.core.errors import InternalError
from mobilize.core.outcome import Outcome

if TYPE_CHECKING:
    from mobilize.compare.plan_run import PlanRun


def run_reference(run: PlanRun) -> None:
    run.status("float reference: build the model once, run it on the accuracy samples")
    ref = run.spawn(run.job("reference", {"name": "reference"}))
    try:
        run.reference = ref.expect(ReferenceDone, run.cfg.timeout_s)
    except StageFailure as exc:
        run.seconds.worker("reference", "reference", ref.seconds)  # into the report saved below
        ref.finish()
        hint = None
        if exc.outcome == Outcome.TIMEOUT and exc.stage == "metric":  # the user's metric, not the model, took the time
            hint = "your metric's time is the stage's: make it return sooner, or give it a longer --timeout"
        elif exc.outcome == Outcome.TIMEOUT:
            hint = f"try --timeout {max(60, round(4 * run.cfg.timeout_s))}; it was {run.cfg.timeout_s:g} s per stage"
        run.reference_failure = {"stage": exc.stage, "outcome": str(exc.outcome), "message": exc.message,
                                 "timeout_s": run.cfg.timeout_s, "hint": hint}
        run.save()  # the folder keeps its logs and a report saying what failed
        failed = InternalError(f"the float reference failed: {exc.message}") if exc.internal else ReferenceFailed(
            f"the float reference failed: {exc.message}", outcome=exc.outcome, stage=exc.stage, hint=hint)
        failed.child_traceback = exc.trace  # what --debug prints (the worker's own traceback)
        raise failed from None
    except BaseException:
        ref.kill()  # interrupted: do not wait for it
        raise
    finally:
        run.seconds.worker("reference", "reference", ref.seconds)
    run.linter = ref  # it lints the model now, while the variants are built and checked
    if run.reference.warning:
        run.status(run.reference.warning)
    run.tick("float reference outputs")


def collect_lint(run: PlanRun) -> None:
    """Collect the lint the reference worker made beside the variants; a failure is a note, never a failed run."""
    ref, run.linter = run.linter, None
    if ref is None:
        return
    run.status("lint of the float model")
    try:
        done = ref.expect(LintDone, run.cfg.timeout_s)
        run.lint, error, run.seconds.lint_s = done.lint, done.error, done.seconds
    except StageFailure as exc:
        error = exc.message
    finally:
        ref.finish()
    if error:
        run.results[run.reference_name].note(f"lint: could not analyse the model: {error}")
