"""The outcomes a variant can end in; the stage a failure happened in decides which, unless the error says more
(an engine that refuses the model is UNSUPPORTED in any stage).

    >>> Outcome.for_stage("load")
    <Outcome.LOAD_FAIL: 'LOAD_FAIL'>
    >>> from mobilize.core.errors import UnsupportedByEngineError
    >>> Outcome.for_error("export", UnsupportedByEngineError("the LiteRT decoder converts Llama only"))
    <Outcome.UNSUPPORTED: 'UNSUPPORTED'>
"""

from __future__ import annotations

import enum


class Outcome(enum.StrEnum):
    PENDING = "PENDING"
    """Not started yet (a report written mid-run)."""
    RUNNING = "RUNNING"
    """Built, loaded and checked; timed rounds under way."""
    OK = "OK"
    OVER_BUDGET = "OVER_BUDGET"
    """Works, but loses more accuracy than the budget allows: kept in the table, never recommended."""
    VACUOUS = "VACUOUS"
    """Works, but the float reference does not depend on its input (random init, all-zero outputs): agreeing
    with it proves nothing, so the accuracy check is vacuous.  Never recommended."""
    MISMATCH = "MISMATCH"
    """Outputs are not what the variant's kind promises."""
    EXPORT_FAIL = "EXPORT_FAIL"
    LOAD_FAIL = "LOAD_FAIL"
    RUN_FAIL = "RUN_FAIL"
    TIMEOUT = "TIMEOUT"
    INTERRUPTED = "INTERRUPTED"
    """The run was stopped (Ctrl-C, SIGTERM) while this variant was in flight."""
    UNAVAILABLE = "UNAVAILABLE"
    """Not run: what it needs is not installed or cannot run on this machine (the reason is said)."""
    UNSUPPORTED = "UNSUPPORTED"
    """Not built: the engine's tool does not take this model - its architecture, an attention or a shape it lacks -
    and said so in one line, naming what it takes (not a crash: EXPORT_FAIL is one)."""

    @classmethod
    def for_stage(cls, stage: str | None) -> "Outcome":
        return _STAGE_OUTCOME.get(stage or "", cls.RUN_FAIL)

    @classmethod
    def for_error(cls, stage: str | None, error: BaseException) -> "Outcome":
        """The outcome of ``error`` raised in ``stage``: UNSUPPORTED for an engine's refusal
        (:class:`~mobilize.core.errors.UnsupportedByEngineError`), else the stage's."""
        from mobilize.core.errors import UnsupportedByEngineError

        return cls.UNSUPPORTED if isinstance(error, UnsupportedByEngineError) else cls.for_stage(stage)

    @property
    def finished(self) -> bool:
        return self not in (Outcome.PENDING, Outcome.RUNNING)


_STAGE_OUTCOME = {"start": Outcome.EXPORT_FAIL, "export": Outcome.EXPORT_FAIL, "passes": Outcome.EXPORT_FAIL,
                  "build": Outcome.EXPORT_FAIL, "load": Outcome.LOAD_FAIL, "run": Outcome.RUN_FAIL,
                  "accuracy": Outcome.RUN_FAIL, "bench": Outcome.RUN_FAIL}
