"""The shared timing host: one torch process that times every torch-timed variant of a compare run.

Eager, TorchScript and ExecuTorch variants need torch in the process that times them (~325 MB each on the
default model, most of it torch itself).  Instead of keeping each variant's checking worker alive for the timed
rounds, the checking worker writes a *timing bundle* (its prepared module, or nothing for a file; the input
specs; the quantized engine; its outputs on the timed sample) and stops; the host loads the variant from it,
checks that it computes the same outputs, and answers ``Bench`` for that variant by name.  The parent still runs
one round at a time (:func:`mobilize.bench.rounds.schedule`), so no two variants are ever timed at once, and
before every round the host sets the variant's quantized engine (a process-wide torch setting that x86 and
qnnpack int8 modules read as they run).

A variant that fails in the host (a load error, a round that raises) fails alone; a host that dies (a crash in
native code, a hang) fails every variant it hosts, each with ``timing failed: ...`` naming the variant it was
timing and how it died (:class:`TimingHost`).

ONNX Runtime, OpenVINO and LiteRT files keep their lean workers (:mod:`mobilize.compare.timing`): one process
each costs 60-115 MB, and sharing one per runtime would save little while a crash in one file would take the
other files' timings with it.
"""

from __future__ import annotations

import dataclasses
import io
import traceback
from typing import Any, Callable

from mobilize.compare.messages import Bench, Close, HostedFailed, Job, Open, Stop, TimerReady, Times

OUTPUT_RTOL = 1e-3
"""How close the hosted copy's outputs must be to the checking worker's (relative to the largest output): both
ran the same module or file with the same threads, so only float summation order may differ."""


# -- the checking worker's side ---------------------------------------------------------------
def write_bundle(path: str, target: Any, specs: list, outputs: list) -> str:
    """What the host needs to time a checked variant; returns '' or why the variant cannot be hosted.

    The module is pickled on its own, as bytes inside the bundle: the host must set the quantized engine before
    it unpickles int8 weights, which are re-packed for whichever engine is set then (loaded under x86, a qnnpack
    module computes other numbers: measured 0.45 off on outputs up to 8 on the default model)."""
    import io
    import pickle

    import torch

    from mobilize.core.errors import typed_headline

    module = getattr(target, "module", None)
    pickled = None
    if module is not None:
        buffer = io.BytesIO()
        try:
            torch.save(module, buffer)
        except (pickle.PicklingError, AttributeError, TypeError, RuntimeError) as exc:  # a local class, a lambda
            return f"its module cannot be pickled ({typed_headline(exc)})"
        pickled = buffer.getvalue()
    torch.save({"module": pickled, "artifact": None if module is not None else str(getattr(target, "path", "")) or None,
                "specs": [s.to_json() for s in specs], "engine": torch.backends.quantized.engine,
                "outputs": [o.detach().clone() for o in outputs]}, path)
    return ""


# -- the host process ---------------------------------------------------------------------------
class _Hosted:
    """One variant loaded in the host: its session, prepared input and quantized engine."""

    def __init__(self, job: Job):
        import torch

        from mobilize.core.artifact import Artifact
        from mobilize.compare.timing import TimedUnit, read_inputs
        from mobilize.plans.plan import Variant
        from mobilize.runtimes.base import open_session
        from mobilize.core.inputs import InputSpec, apply_memory_format
        from mobilize.sources.models import ModelSource, import_python_file
        from mobilize.sources.reference import RefKind

        bundle = torch.load(job.timing_bundle, weights_only=True)  # written by this run's own checking worker
        self.engine = bundle["engine"]
        torch.backends.quantized.engine = self.engine  # before the module: int8 weights are packed for it as they load
        variant = Variant.from_dict(job.variant)
        specs = [InputSpec.from_json(s) for s in bundle["specs"]]
        if bundle["module"] is not None:
            if getattr(job.model, "kind", None) == RefKind.PYTHON_FILE:  # the classes the pickled module refers to
                import_python_file(job.model)  # under the name every process gives that file
            module = torch.load(io.BytesIO(bundle["module"]), weights_only=False)  # pickled by that same worker
            _restore_module_state(module)
            target = ModelSource(module, str(job.model), specs)
        else:
            target = Artifact.from_file(job.artifact or bundle["artifact"])
        self.session = open_session(target, variant.runtime,
                                    options=variant.recipe.runtime.with_threads(job.threads))
        inputs = [apply_memory_format(torch.from_numpy(a), s) for a, s in zip(read_inputs(job.inputs_path), specs)]
        native = self.session.prepare(inputs)
        self.session.checked_run(native, inputs)
        self.session.reset_state()  # the first call from a reset state, as the checked variant's was
        _same_outputs(self.session.run(inputs), bundle["outputs"])
        self.unit = TimedUnit(self.session, inputs, job.unit, native, frames=job.frames)
        self.unit.start_frames()

    @property
    def runtime(self) -> str:
        return self.session.name

    def bench(self, command: Bench) -> Times:
        import torch

        torch.backends.quantized.engine = self.engine
        return self.unit.round(command)


def hosted_for(job: Job):
    """What the host holds for one variant: a decoder file in its decoder session (the ``generation`` task), else
    the variant's module or file in its runtime session."""
    if job.decoding is not None:
        from mobilize.compare.decoder_worker import HostedDecoder

        return HostedDecoder(job)
    return _Hosted(job)


def _restore_module_state(module) -> None:
    """torch's quantized modules unpickle without nn.Module's hook dicts (their ``__setstate__`` skips
    ``Module.__setstate__``), and then fail on their first call: give them the empty ones a new module has."""
    import torch

    fresh = torch.nn.Module().__dict__
    for m in module.modules():
        for key, value in fresh.items():
            if key not in m.__dict__:
                m.__dict__[key] = type(value)()


def _same_outputs(got: list, expected: list) -> None:
    from mobilize.core.errors import InternalError

    scale = max((float(e.abs().max()) for e in expected if e.numel()), default=0.0)
    diff = max((float((g.float() - e.float()).abs().max()) for g, e in zip(got, expected) if e.numel()), default=0.0)
    if len(got) != len(expected) or diff > OUTPUT_RTOL * scale + 1e-6:
        raise InternalError(f"the hosted copy does not compute what the checked variant did (largest output "
                            f"difference {diff:.3g}, outputs up to {scale:.3g})")


def serve_host(conn, job: Job, enter: Callable[[str], None]) -> None:
    """Open variants, time them by name, close them, until ``Stop``."""
    hosted: dict[str, _Hosted] = {}
    enter("bench")
    while True:
        command = conn.recv()
        if isinstance(command, Open):
            opened = _answer(conn, command.name, "load", lambda: hosted_for(command.job))
            if opened is not None:
                hosted[command.name] = opened
                conn.send(TimerReady(opened.runtime, True, _peak()))
        elif isinstance(command, Bench):
            one = hosted.get(command.variant)
            times = _answer(conn, command.variant, "bench", lambda: one.bench(command))
            if times is not None:
                conn.send(times)
        elif isinstance(command, Close):
            gone = hosted.pop(command.name, None)
            if gone is not None:
                gone.session.close()
        elif isinstance(command, Stop):
            for one in hosted.values():
                one.session.close()
            return


def _answer(conn, name: str, stage: str, work: Callable[[], Any]) -> Any:
    """``work()``, or a ``HostedFailed`` for this variant alone: the host is a process boundary for each variant
    it holds (as :func:`mobilize.compare.worker.main` is for its one), so its other variants go on."""
    from mobilize.core.errors import MobilizeError, headline, is_bug

    try:
        return work()
    except Exception as exc:
        text = str(exc) if isinstance(exc, MobilizeError) else f"{type(exc).__name__}: {headline(exc)}"
        conn.send(HostedFailed(name, stage, text, traceback.format_exc(), is_bug(exc)))
        return None


def _peak() -> float:
    from mobilize.bench.harness import peak_rss_mb

    return peak_rss_mb()


# -- the parent's side --------------------------------------------------------------------------
class TimingHost:
    """The parent's end of one host process (a compare :class:`~mobilize.compare.worker_handle.Worker` running
    :func:`serve_host`).  ``open`` gives a :class:`Hosted` per variant, which the timed rounds use as they use
    a worker of their own."""

    def __init__(self, worker):
        self.worker = worker
        self.hosted: list[str] = []
        """Variants open in the host now."""
        self.death: str | None = None
        """How the host died (then every variant it hosted fails with it)."""
        self.outcome = None

    def open(self, name: str, job: Job, timeout_s: float) -> tuple["Hosted", TimerReady]:
        self.worker.send(Open(name, job))
        ready = self.expect(name, TimerReady, timeout_s, "loading")
        self.hosted.append(name)
        return Hosted(self, name, job), ready

    def expect(self, name: str, kind: type, timeout_s: float, doing: str) -> Any:
        from mobilize.compare.failures import StageFailure

        if self.death is not None:
            raise StageFailure(self.outcome, "bench", f"timing failed: {self.death}")
        try:
            msg = self.worker.expect((kind, HostedFailed), timeout_s)
        except StageFailure as exc:  # the host process itself crashed, hung or raised outside a variant
            shared = [n for n in self.hosted if n != name]
            self.death = (f"the shared timing host{' (also timing ' + ', '.join(shared) + ')' if shared else ''} "
                          f"failed while {doing} {name}: {exc.message}")
            self.outcome = exc.outcome
            self.worker.kill()
            raise StageFailure(exc.outcome, "bench", f"timing failed: {self.death}", exc.trace, exc.internal) from None
        if isinstance(msg, HostedFailed):
            from mobilize.core.outcome import Outcome

            raise StageFailure(Outcome.for_stage(msg.stage), msg.stage, msg.message, msg.trace, msg.internal)
        return msg

    def close(self, name: str) -> None:
        if name in self.hosted:
            self.hosted.remove(name)
            if self.death is None:
                self.worker.send(Close(name))

    def stop(self) -> None:
        if self.death is None:
            self.worker.stop()
        else:
            self.worker.kill()


@dataclasses.dataclass
class Hosted:
    """One variant in a :class:`TimingHost`, with the interface compare's timed rounds use on a worker."""

    host: TimingHost
    name: str
    job: Job

    @property
    def child(self):
        """The host's process (shared: memory is counted once per process)."""
        return self.host.worker.child

    def send(self, msg: Any) -> None:
        if isinstance(msg, Bench):
            msg = dataclasses.replace(msg, variant=self.name)
        if self.host.death is None:
            self.host.worker.send(msg)

    def expect(self, kind: type, timeout_s: float) -> Any:
        return self.host.expect(self.name, kind, timeout_s, "timing")

    def rss_mb(self) -> float:
        return self.host.worker.rss_mb()

    def kill(self) -> None:
        """After a failed round: this variant leaves the host, the host stays for the others."""
        self.host.close(self.name)

    def stop(self) -> None:
        self.host.close(self.name)
