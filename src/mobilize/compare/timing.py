"""Timed rounds inside a compare worker, and the lean timing worker.

A file whose runtime needs no torch (``Session.needs_torch`` False: ONNX Runtime, OpenVINO, LiteRT) is timed
in a process that loads only that runtime, fed the one sample the reference job wrote to an .npz; its
accuracy was measured before, in a torch worker.  Every other variant is timed in the torch worker that
checked it.  Both answer the same ``Bench`` / ``Stop`` commands.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

from mobilize.compare.messages import Bench, Job, Stop, TimerReady, Times


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
    enter("bench")
    conn.send(TimerReady(session.name, "torch" in sys.modules, peak_rss_mb()))
    serve_rounds(conn, session, native)


def serve_rounds(conn, session, native: Any) -> None:
    """Answer ``Bench`` with ``Times`` until ``Stop``."""
    from mobilize.bench.harness import peak_rss_mb, warm_round

    while True:
        command = conn.recv()
        if isinstance(command, Bench):
            times, total = warm_round(session.run_prepared, native, command.iterations, command.warmup,
                                      command.warmup_s)
            conn.send(Times(times, total, peak_rss_mb()))
        elif isinstance(command, Stop):
            session.close()
            return


def lean_runtime(runtime: str) -> bool:
    """Whether ``runtime`` loads and runs its files without torch (so compare times it in a lean worker)."""
    from mobilize.runtimes import RUNTIMES

    return not RUNTIMES.get(runtime).needs_torch
