"""The per-variant worker process: the float reference, a build, or load + accuracy + timed rounds.

Runs in a spawned process so a crash or hang in a runtime cannot take the sweep down.  It tells
the parent which stage it is in before entering it, so a crash is attributed to the right
stage.  The float model is materialised once, by the reference job, whose weights every other
job loads: a model initialised at random gives every variant the same weights.  Third-party
stderr noise goes to the worker's log file (:class:`mobilize.pipeline.process.Child` sends it there); its
tail joins the note of a failed stage.
"""

from __future__ import annotations

import gc
import time
import traceback
from typing import Any

from mobilize.compare.messages import Built, Failed, Job, LintDone, Ready, ReferenceDone, Stage
from mobilize.core.outcome import Outcome
from mobilize.core.runtime_options import one_thread


def main(conn, job: Job) -> None:
    global _enter
    stage = "start"

    def enter(name: str) -> None:
        nonlocal stage
        stage = name
        conn.send(Stage(name))

    _enter = enter

    try:
        _run_job(conn, job, enter)
    except BaseException as exc:  # the process boundary: everything goes to the parent with its stage
        from mobilize.core.errors import MobilizeError, headline, is_bug

        internal = is_bug(exc)
        text = str(exc) if isinstance(exc, MobilizeError) else f"{type(exc).__name__}: {headline(exc)}"
        try:
            conn.send(Failed(stage, text, traceback.format_exc(), internal, str(Outcome.for_error(stage, exc))))
        except (BrokenPipeError, OSError):
            pass
    finally:
        conn.close()


def _run_job(conn, job: Job, enter) -> None:
    """The job's stages in this worker process (``main`` is its boundary)."""
    import warnings

    warnings.simplefilter("ignore")
    if job.kind == "time":  # the lean timing worker: its runtime only
        from mobilize.compare.timing import time_file

        time_file(conn, job, enter)
        return
    import torch

    # Untimed work (the reference, exports, passes, accuracy) runs on one intra-op thread: a check runs beside
    # an export, and on a busy 2-core machine two OpenMP threads wait on each other at every op (measured on
    # the default model: 3 s per sample with 2 threads, 27-96 ms with 1).  Timed runs use job.threads.
    torch.set_num_threads(job.threads if job.kind.startswith("time") else 1)
    if job.decoding is not None and job.kind in ("reference", "build", "run"):  # a causal decoder's jobs
        from mobilize.compare.decoder_worker import serve_decoder

        serve_decoder(conn, job, enter)
    elif job.kind == "time-torch":
        from mobilize.compare.timing import time_file

        time_file(conn, job, enter)
    elif job.kind == "time-host":  # the shared timing host of the torch-timed variants
        from mobilize.compare.host import serve_host

        serve_host(conn, job, enter)
    elif job.kind == "reference":
        enter("reference")
        done, module = make_reference(job)
        conn.send(done)
        enter("lint")  # the parent goes on with the variants meanwhile
        t0 = time.monotonic()
        lint, error = _lint_section(module, job) if module is not None else (None, None)
        conn.send(LintDone(lint, error, time.monotonic() - t0))
    elif job.kind == "build":
        enter("export")
        conn.send(build_variant(job))
    else:
        serve(conn, job, enter)


def _specs(job: Job):
    from mobilize.core.inputs import InputSpec

    return [InputSpec.from_json(s) for s in job.input_specs]


def accuracy_set(job: Job) -> tuple[list[list], list[int] | None]:
    """The accuracy samples (each the list of model inputs, shaped as the model declares them: a batch of two stays
    two) and labels (one per row); seeded random inputs without data.  Read once from the data by the reference job,
    which saves them beside the reference outputs for every other job (a data reader such as scikit-learn's costs
    seconds of imports in each process).  A stateful model's samples are its stream (:func:`accuracy_stream`)."""
    import torch

    from mobilize.core.inputs import make_random_inputs
    from mobilize.sources.data import open_data

    cache = _accuracy_cache(job)
    if cache is not None and cache.exists():
        saved = torch.load(cache, weights_only=True)
        return saved["inputs"], saved["labels"]
    specs = _specs(job)
    if job.data is None:
        xs, ys = [make_random_inputs(specs, seed) for seed in range(min(job.accuracy_samples, 16))], None
    else:
        xs, ys = open_data(job.data).labelled_sample_lists(specs, job.accuracy_samples, job.input_names)
    if cache is not None and job.kind == "reference":
        torch.save({"inputs": xs, "labels": ys, "stream": None}, cache)
    return xs, ys


def accuracy_stream(job: Job) -> list[tuple[int, int]]:
    """The state pairs (input, output) the reference found, which every job then streams; empty for a model
    without state (:mod:`mobilize.accuracy.stream`)."""
    return [tuple(p) for p in _saved_set(job).get("stream") or []]


def accuracy_held(job: Job):
    """The state the reference keeps inside its module (:mod:`mobilize.runtimes.held_state`), which every job then
    judges over a stream from a reset state; None for a model that keeps none."""
    from mobilize.runtimes.held_state import HeldState

    held = _saved_set(job).get("held")
    return HeldState.from_json(held) if held else None


def _saved_set(job: Job) -> dict:
    import torch

    cache = _accuracy_cache(job)
    if cache is None or not cache.exists():
        return {}
    return torch.load(cache, weights_only=True)


def _stream_set(job: Job, pairs: list[tuple[int, int]], held=None) -> list[list]:
    """A stateful model's stream: the data's samples in order (else seeded random chunks), from a zero state (state
    as inputs: ``pairs``) or from the module's reset (state kept inside it: ``held``); saved for every other job in
    place of the single-call samples."""
    import torch

    from mobilize.accuracy.stream import STREAM_CALLS, zero_state
    from mobilize.core.inputs import make_random_inputs
    from mobilize.sources.data import open_data

    specs = _specs(job)
    if job.data is None:
        calls = [make_random_inputs(specs, seed) for seed in range(STREAM_CALLS)]
    else:
        calls = open_data(job.data).sample_lists(specs, max(job.accuracy_samples, STREAM_CALLS), job.input_names)
    calls = zero_state(calls, pairs)
    cache = _accuracy_cache(job)
    if cache is not None:
        torch.save({"inputs": calls, "labels": None, "stream": [list(p) for p in pairs],
                    "held": held.to_json() if held else None}, cache)
    return calls


def judged_outputs(job: Job, xs: list[list], run, reset=None) -> tuple[list[list], list[str]]:
    """``run`` on the accuracy samples as the model is used: a stateful model's stream with its state carried
    (every call in order; state kept inside the module reset first by ``reset``), else one call per sample; a batch
    of several rows split into rows.  Returns the outputs to judge (flattened tensors per sample) and notes saying
    how they were fed (a floating input of rank 0 that no --input set is named with the seeded random values it
    got)."""
    outs, notes = _fed(job, xs, run, reset)
    if job.data is None:
        from mobilize.sources.bound import random_scalar_notes

        notes += random_scalar_notes(_specs(job), job.input_names or (), xs)
    return outs, notes


def _fed(job: Job, xs: list[list], run, reset=None) -> tuple[list[list], list[str]]:
    from mobilize.accuracy.stream import batch_rows, describe_pairs, run_stream, split_rows

    pairs, held = accuracy_stream(job), accuracy_held(job)
    if held is not None and reset is not None:
        reset()
    if pairs:
        outs = run_stream(run, xs, pairs)
        return outs, [f"accuracy: a stateful model ({describe_pairs(pairs, job.input_names or ())}): judged over a "
                      f"stream of {len(xs)} calls in order, each call's state fed to the next from a zero state, "
                      f"as the model runs; single calls do not decide its verdict"]
    if held is not None:
        start = "a reset state" if held.reset else "the file's saved state"
        return [list(run(x)) for x in xs], [
            f"accuracy: a model with {held.text()}: judged over a stream of {len(xs)} calls in order from "
            f"{start}, as the model runs; single calls do not decide its verdict"]
    outs = [list(run(x)) for x in xs]
    rows = batch_rows(_specs(job))
    if rows <= 1:
        return outs, []
    split = split_rows(outs, rows)
    if split is None:
        return outs, [f"accuracy: the inputs' batch of {rows} was fed whole; an output without that batch first "
                      f"is judged per call, not per row"]
    return split, [f"accuracy: the inputs' batch of {rows} was fed whole, as the model declares it, and its outputs "
                   f"judged row by row"]


def _accuracy_cache(job: Job):
    from pathlib import Path

    return Path(job.reference_path).with_name("accuracy_set.pt") if job.reference_path else None


class _DataOnFirstUse:
    """``open_data(reference)`` when first used: a variant that calibrates nothing never imports the data's reader."""

    def __init__(self, reference: str):
        self.reference = reference
        self._data = None

    def __getattr__(self, name: str):
        if name.startswith("__"):  # copy/pickle probing: not the data's business
            raise AttributeError(name)
        if self._data is None:
            from mobilize.sources.data import open_data

            self._data = open_data(self.reference)
        return getattr(self._data, name)


def load_model(job: Job):
    """The user's model with the reference's weights (identical in every process); a file made elsewhere as is."""
    import torch

    from mobilize.sources.models import resolve_model

    source = resolve_model(job.model, trust_pickle=job.trust_pickle, bound_args=job.bound_args)
    if not hasattr(source, "module"):
        return source
    saved = torch.load(job.reference_path, weights_only=True)
    source.module.load_state_dict(saved["state_dict"])
    return source


def make_reference(job: Job) -> tuple[ReferenceDone, Any]:
    """The reference outputs (saved for every other job), and the float module to lint (None for a file): the
    user's module, or a file made elsewhere run in its format's default runtime."""
    import torch

    from mobilize.runtimes.base import flatten_outputs, open_session, output_names
    from mobilize.runtimes.held_state import StateKeeper
    from mobilize.sources.models import resolve_model

    source = resolve_model(job.model, trust_pickle=job.trust_pickle, bound_args=job.bound_args)
    if not hasattr(source, "module"):
        with open_session(source, threads=job.threads) as session:
            return _reference(job, session.run, None, keeper=session), None

    def run(x: list) -> list:
        with torch.inference_mode():
            return [t.detach().clone() for t in flatten_outputs(source.module(*x))]

    def names(x: list) -> list[str]:
        with torch.inference_mode():
            return output_names(source.module(*x))

    state_dict = {k: v.detach().clone() for k, v in source.module.state_dict().items()}
    return _reference(job, run, names, state_dict, StateKeeper(source.module, run)), source


def _reference(job: Job, run, names_of, state_dict: dict | None = None, keeper=None) -> ReferenceDone:
    """Run the reference on the accuracy samples as the model is used (a stateful model's stream: its state found
    here, from the first call's outputs; state kept inside the module: found by ``keeper``, which resets it
    before the judged stream), save what every other job compares against and judge the reference."""
    import torch

    from mobilize.accuracy.metrics import compare_outputs
    from mobilize.accuracy.stream import state_pairs
    from mobilize.accuracy.verify import degenerate_reference

    xs, ys = accuracy_set(job)
    first = run(xs[0]) if xs else []
    if not first:
        from mobilize.core.errors import UnsupportedModelError

        raise UnsupportedModelError("the model returned no tensors", hint="forward must return a tensor, a tuple "
                                                                           "or a dict of tensors")
    names = names_of(xs[0]) if names_of else ([f"output{i}" for i in range(len(first))] if len(first) > 1
                                              else ["output"])
    pairs = state_pairs(_specs(job), first)
    held = keeper.held_state(xs[0]) if keeper is not None else None
    if pairs or held is not None:
        xs, ys = _stream_set(job, pairs, held), None
    if xs and job.inputs_path:
        from mobilize.compare.timing import write_inputs

        write_inputs(job.inputs_path, xs[0])
    judged, _ = judged_outputs(job, xs, run, keeper.reset_state if keeper is not None else None)
    outs = [[t.detach().float().clone() for t in sample] for sample in judged]
    ys = ys if ys is not None and len(ys) == len(outs) else None
    torch.save({"state_dict": state_dict, "outputs": outs, "labels": ys, "names": names}, job.reference_path)
    correct = compare_outputs(outs, outs, ys).correct if ys is not None else None
    task = _task(job, outs, ys, names, [tuple(x.shape) for x in xs[0] if hasattr(x, "shape")])
    return ReferenceDone(len(outs), ys is not None, correct, names, len(outs[0]),
                         degenerate_reference(outs, task=task["name"]), task)  # the same rule for a module or a file


_enter: Any = lambda name: None
"""Tells the parent the stage this worker enters (set by :func:`main`): code below the stage functions (the user's
metric) announces itself with it, so a metric that never returns is named, not the stage around it."""


def _task(job: Job, outs: list, ys, names, input_shapes: list[tuple]) -> dict:
    from mobilize.accuracy.tasks import reference_task

    if job.metric:
        _enter("metric")  # the user's code from here on: a timeout is theirs
    return reference_task(job.task, job.metric, outs, ys, names, input_shapes).to_json()


def _lint_section(source, job: Job) -> tuple[dict | None, str | None]:
    """The architecture lint and per-layer profile for the report: module checks and MACs only (the target
    probes and timings are `mobilize lint`'s job).  A lint failure is a note, never a failed compare."""
    from mobilize.core.errors import UserError, third_party_failure, typed_headline
    from mobilize.lint import LintConfig, lint_section

    try:
        with third_party_failure("the report's lint") as failed:  # the graph capture failing on an unusual model
            return lint_section(source.module, LintConfig(targets=(), time=False), input_specs=_specs(job)), None
    except UserError as exc:
        return None, str(exc)
    return None, typed_headline(failed.error)


def _prepare(job: Job):
    """The reference model and the variant's context; no passes run yet."""
    from mobilize.core.context import Context
    from mobilize.plans.plan import Variant
    from mobilize.core.target import Target

    variant = Variant.from_dict(job.variant)
    source = load_model(job)
    ctx = Context(input_specs=_specs(job), data=_DataOnFirstUse(job.calibration) if job.calibration else None,
                  target=Target.parse(job.target), input_names=list(job.input_names or []),
                  bound_args=dict(job.bound_args))
    return variant, source, ctx


def build_variant(job: Job) -> Built:
    from pathlib import Path

    from mobilize.pipeline.build import build, verify_artifact
    from mobilize.core.errors import MobilizeError, headline

    variant, source, ctx = _prepare(job)
    result = build(getattr(source, "module", source), variant.recipe, ctx, Path(job.out_dir) / variant.name)
    built = result.artifacts[0]
    notes = list(built.artifact.notes)
    try:  # the file vs its prepared module, as optimize checks it
        fidelity = verify_artifact(built, result.module, ctx, task=job.task).to_json()
    except MobilizeError as exc:  # the quality check against float still runs in the load stage
        fidelity = None
        notes.append(f"fidelity: not checked on this host: {headline(exc)}")
    return Built(str(built.artifact.path), str(built.artifact.format), built.artifact.size_bytes, str(result.kind),
                 notes, {**built.details, **ctx.details}, fidelity)


def serve(conn, job: Job, enter) -> None:
    """Load and check one variant, then answer its timed rounds.
    Long because it is one sequence of stages in the order it reports them, sharing their state; a helper would
    free the variant's context earlier, changing the memory the rounds measure."""
    import torch

    from mobilize.accuracy.metrics import compare_outputs
    from mobilize.accuracy.tasks import apply_task
    from mobilize.core.artifact import Artifact
    from mobilize.core.backend import backend_for_format
    from mobilize.pipeline.build import prepare
    from mobilize.compare.timing import TimedUnit, serve_rounds
    from mobilize.plans.plan import Variant
    from mobilize.runtimes.base import open_session
    from mobilize.core.inputs import apply_memory_format
    from mobilize.sources.models import ModelSource

    notes: list[str] = []
    details: dict[str, Any] = {}
    if job.artifact:
        variant = Variant.from_dict(job.variant)
        target, specs, kind = Artifact.from_file(job.artifact), _specs(job), None
    else:
        enter("passes")
        variant, source, ctx = _prepare(job)
        with one_thread():
            module = prepare(getattr(source, "module", source), variant.recipe, ctx)
        # a file made elsewhere runs as it is (it has no passes): the variant is the runtime and its options
        target = ModelSource(module, str(job.model), list(ctx.input_specs)) if hasattr(source, "module") else module
        specs, kind = ctx.input_specs, ("quantized" if ctx.quant.quantized else "float")
        notes += ctx.notes
        details.update(ctx.details)
        del source
    enter("load")
    options = variant.recipe.runtime.with_threads(job.threads)
    t0 = time.perf_counter_ns()
    session = open_session(target, variant.runtime, options=options)
    load_ms = (time.perf_counter_ns() - t0) / 1e6
    notes += session.notes
    enter("run")
    xs, ys = accuracy_set(job)
    xs = [[apply_memory_format(t, s) for t, s in zip(x, specs)] for x in xs]
    native = session.prepare(xs[0])
    t0 = time.perf_counter_ns()
    session.checked_run(native, xs[0])
    first_run_ms = (time.perf_counter_ns() - t0) / 1e6
    enter("accuracy")
    with one_thread():  # not timed (a torch session's threads were set to job.threads as it loaded)
        outs, fed = judged_outputs(job, xs, session.run, session.reset_state)
    notes += fed
    reference = torch.load(job.reference_path, weights_only=True)
    ys = reference["labels"]  # one per judged row (None where the rows could not be told apart)
    comparison = compare_outputs(outs, reference["outputs"], ys, names=reference["names"])
    _mark_stream(job, comparison, len(xs))
    if job.metric:
        enter("metric")
    apply_task(comparison, job.task, outs, reference["outputs"], ys, job.metric)
    size = getattr(target, "size_bytes", None) or _param_bytes(target)
    backend = backend_for_format(str(target.format)) if job.artifact else None
    if backend is not None and str(target.format) in backend.compare_profile:
        enter("profile")
        notes += _time_profile(job, xs[0], details)
    hostable = None
    if job.timing_bundle and type(session).needs_torch:
        from mobilize.compare.host import write_bundle

        session.reset_state()  # the host checks its copy's first call from a reset state
        hostable = write_bundle(job.timing_bundle, target, specs, session.run(xs[0]))
    timed_inputs = xs[0]
    del outs, reference, xs
    gc.collect()
    _trim_heap()
    enter("bench")
    unit = TimedUnit(session, timed_inputs, job.unit, native, frames=job.frames)
    details["interface"] = session.interface().to_json(job.unit)
    conn.send(Ready(session.name, str(target.format), kind or "", load_ms, first_run_ms, comparison, notes,
                    {**details, **session.details()}, size, type(session).measures_latency, hostable))
    serve_rounds(conn, session, unit)


def _mark_stream(job: Job, comparison, calls: int) -> None:
    """A stateful model's comparison is its stream's: the one-value budget then names the stream rules."""
    from mobilize.accuracy.metrics import mark_stream
    from mobilize.accuracy.stream import describe_pairs

    pairs, held = accuracy_stream(job), accuracy_held(job)
    if pairs:
        mark_stream(comparison, calls, describe_pairs(pairs, job.input_names or ()))
    elif held is not None:
        mark_stream(comparison, calls, held.text(), "a reset state" if held.reset else "the file's saved state")


def _time_profile(job: Job, inputs: list, details: dict[str, Any]) -> list[str]:
    """Where the file's time goes (inside / outside the delegate; ExecuTorch's ETDump): a WARNING note when a few
    fallback ops dominate."""
    from mobilize.profile import time_notes

    return time_notes(job.artifact, inputs, threads=job.threads, details=details)


def _trim_heap() -> None:
    """Give freed memory back to the OS, so a worker parked for timed rounds holds only its runtime."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name:
        libc = ctypes.CDLL(name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)


def _param_bytes(target) -> int | None:
    from mobilize.sources.models import module_size_bytes

    module = getattr(target, "module", None)
    return None if module is None else module_size_bytes(module)
