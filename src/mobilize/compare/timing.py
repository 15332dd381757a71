"""Timed rounds inside a compare worker, and the lean timing worker.

A file whose runtime needs no torch (``Session.needs_torch`` False: ONNX Runtime, OpenVINO, LiteRT) is timed
in a process that loads only that runtime, fed the one sample the reference job wrote to an .npz; its
accuracy was measured before, in a torch worker.  Every other variant is timed in the torch worker that
checked it.  Both answer the same ``Bench`` / ``Stop`` commands.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

from mobilize.compare.messages import Bench, FrameRound, Job, Stop, TimerReady, Times


def write_inputs(path: str, sample: Sequence[Any]) -> None:
    """The timed sample (one batch-1 tensor per model input, in order), for the lean workers."""
    import numpy as np

    from mobilize.runtimes.base import as_array

    np.savez(path, **{f"input{i}": as_array(t) for i, t in enumerate(sample)})


def read_inputs(path: str) -> list:
    import numpy as np

    with np.load(path) as npz:
        return [npz[f"input{i}"] for i in range(len(npz.files))]


def time_file(conn, job: Job, enter: Callable[[str], None]) -> None:
    """Load ``job.artifact`` in its runtime, run it once on the saved inputs, then serve timed rounds.

    In a ``time`` job nothing here imports torch (``TimerReady.torch_loaded`` says whether anything did)."""
    from mobilize.core.artifact import Artifact
    from mobilize.bench.harness import peak_rss_mb
    from mobilize.plans.plan import Variant
    from mobilize.runtimes.base import open_session

    enter("load")
    variant = Variant.from_dict(job.variant)
    session = open_session(Artifact.from_file(job.artifact), variant.runtime,
                           options=variant.recipe.runtime.with_threads(job.threads))
    inputs = read_inputs(job.inputs_path)
    if job.kind == "time-torch":  # as a torch worker feeds it: torch tensors
        import torch

        inputs = [torch.from_numpy(a) for a in inputs]
    enter("run")
    native = session.prepare(inputs)
    session.checked_run(native, inputs)
    unit = TimedUnit(session, inputs, job.unit, native, frames=job.frames)
    unit.call[0](unit.call[1])  # the timed call once before the rounds: a failing conversion fails in this stage
    unit.start_frames()
    enter("bench")
    conn.send(TimerReady(session.name, "torch" in sys.modules, peak_rss_mb()))
    serve_rounds(conn, session, unit)


class TimedUnit:
    """What a compare worker times for one file: the call on the run's unit (:func:`~mobilize.runtimes.base.timed_call`),
    and, for a file whose interface converts, the file-alone call beside it (its second figure, ``p50 file``).

    The file-alone loop runs right after the same-work one in the same round, on half its iterations (at least
    5): the model is warm from it, and the second figure is a median, not a race, so it needs fewer.

    With ``frames`` (``--frames``: :class:`mobilize.camera.loop.FrameTiming`'s JSON) the round then runs the file's
    frame-to-answer loop (:mod:`mobilize.camera.loop`) on as many frames as the first loop's iterations, after
    the same warm-up (the loop is a race's unit then), and the infer stage's control on half as many."""

    def __init__(self, session, inputs, unit: str, prepared: Any = None, frames: dict | None = None):
        from mobilize.runtimes.base import Unit, timed_call

        self.unit = Unit(unit)
        self.call = timed_call(session, inputs, self.unit, prepared)
        converts = self.unit is Unit.SAME_WORK and session.interface().converts
        self.alone = timed_call(session, inputs, Unit.FILE, prepared) if converts else None
        self.session, self.inputs, self.prepared, self.timing = session, list(inputs), prepared, frames
        self.frames = None
        """The frame loop, made on the first round (a checking worker that hands the file to another never makes
        it) or by :meth:`start_frames`."""

    def start_frames(self) -> None:
        """Make the frame loop (convert the first frame and run the file on it) now, if ``--frames`` asks for one."""
        if self.timing and self.frames is None:
            from mobilize.camera.loop import FrameTiming, frame_loop_for

            self.frames = frame_loop_for(self.session, self.inputs, FrameTiming(**self.timing))
            if self.prepared is None:
                self.prepared = self.session.prepare(self.inputs)

    def round(self, command: Bench) -> Times:
        from mobilize.bench.harness import peak_rss_mb, warm_round

        times, total = warm_round(*self.call, command.iterations, command.warmup, command.warmup_s)
        alone = None
        if self.alone is not None:
            alone, _ = warm_round(*self.alone, max(5, command.iterations // 2), 1, 0.0)
        return Times(times, total, peak_rss_mb(), alone, self._frame_round(command))

    def _frame_round(self, command: Bench) -> FrameRound | None:
        self.start_frames()
        if self.frames is None:
            return None
        loop = self.frames
        got = loop.round(command.iterations, command.warmup, command.warmup_s)
        gap = loop.gap_round(max(5, command.iterations // 2), self.prepared)
        facts = {"output_layout": str(loop.cfg.output_layout), "output_dtype": str(loop.cfg.output_dtype),
                 "output_size": list(loop.cfg.output_size), "resize": str(loop.cfg.resize),
                 "feed_shares_buffer": loop.feed_shares_buffer, "first_frame_top_k": loop.first_answer}
        return FrameRound(got.times_ns, got.loop_ns, got.stage_ns.T.tolist(), gap, facts)


def serve_rounds(conn, session, unit: TimedUnit) -> None:
    """Answer ``Bench`` with ``Times`` until ``Stop``."""
    while True:
        command = conn.recv()
        if isinstance(command, Bench):
            conn.send(unit.round(command))
        elif isinstance(command, Stop):
            session.close()
            return


def lean_runtime(runtime: str) -> bool:
    """Whether ``runtime`` loads and runs its files without torch (so compare times it in a lean worker)."""
    from mobilize.runtimes import RUNTIMES

    return not RUNTIMES.get(runtime).needs_torch
