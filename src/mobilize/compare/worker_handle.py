"""The parent's end of one compare worker process: :class:`Worker` starts it, waits for its answers within a
deadline (a crash, a timeout or an error it reports becomes a :class:`~mobilize.compare.failures.StageFailure`)
and clocks the seconds each stage took."""

from __future__ import annotations

import time
from typing import Any, Callable

from mobilize.compare.failures import StageFailure
from mobilize.compare.messages import Failed, Job, Stage, Stop
from mobilize.core.outcome import Outcome
from mobilize.pipeline.process import DECODER_PRELOAD, PRELOAD, Child, Lost


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
                           on_start=started, preload=target is None and job.kind != "time" and preload_for(job))

    def expect(self, kind: type, timeout_s: float) -> Any:
        """The next message of type ``kind``; raises StageFailure on error, crash or timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = self.child.recv(deadline - time.monotonic())
            except Lost as lost:
                self._clock(time.monotonic())
                if lost.timed_out:
                    said = f"--metric {self.job.metric} gave no answer within {timeout_s:g} s (--timeout)" \
                        if self.stage == "metric" else f"no answer within {timeout_s:g} s in stage '{self.stage}'"
                    raise StageFailure(Outcome.TIMEOUT, self.stage, said) from None
                raise StageFailure(Outcome.for_stage(self.stage), self.stage, f"the process {lost} in stage "
                                   f"'{self.stage}'{self.child.log_tail()}") from None
            if isinstance(msg, Stage):
                self._clock(msg.at)
                self.stage = msg.name
            elif isinstance(msg, Failed):
                self._clock(time.monotonic())
                outcome = Outcome(msg.outcome) if msg.outcome else Outcome.for_stage(msg.stage)
                raise StageFailure(outcome, msg.stage, msg.message + self.child.log_tail(),
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


def preload_for(job: Job) -> tuple[str, ...]:
    """The modules the fork server of this torch worker has imported: a causal decoder's jobs that load its
    transformers model (the reference, every build, the check of a file its session runs in transformers, the timing
    host when it holds such a file) fork from the server that has transformers too; the rest from the torch server."""
    if job.decoding is not None and (job.kind in ("reference", "build") or job.variant.get("loads_transformers")):
        return DECODER_PRELOAD
    return PRELOAD
