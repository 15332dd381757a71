"""How a compare stage fails: :class:`StageFailure` (one variant's stage, recorded in its result) and
:class:`ReferenceFailed` (the float reference, which ends the run)."""

from __future__ import annotations

from mobilize.core.errors import UserError
from mobilize.core.outcome import Outcome


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
