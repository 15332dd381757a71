"""What compare's parent and its worker processes say to each other: typed messages, no tuples.

    >>> Stage("load")
    Stage(name='load')
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any


@dataclasses.dataclass
class Job:
    """What a worker process is asked to do."""

    kind: str
    """reference | build | run | time (a file timed in a lean worker: its runtime only, no torch) | time-torch
    (the same in a process with torch loaded, as every worker timed before; for benchmarks/timing_agreement.py)
    | time-host (the shared timing host of the torch-timed variants, :mod:`mobilize.compare.host`)"""
    model: Any
    """The model reference, parsed once by the parent (a :class:`mobilize.sources.reference.ModelRef`)."""
    variant: dict[str, Any]
    input_specs: list[dict[str, Any]]
    data: str | None
    calibration: str | None
    out_dir: str
    threads: int
    accuracy_samples: int
    reference_path: str
    """The float model's weights and outputs, written once by the reference job and read by every other."""
    log_path: str
    """Where the worker's stderr (third-party noise) goes; its tail joins a failure's note."""
    target: str = "host"
    input_names: list[str] | None = None
    """The model's input names (its forward's parameters), to match an .npz's arrays by name."""
    artifact: str | None = None
    trust_pickle: bool = False
    bound_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Non-tensor forward arguments bound by name (``--input sr=16000``)."""
    task: str | None = None
    """The model's task (``--task``; for variants the reference's resolved one); None: guessed from the outputs."""
    metric: str | None = None
    """``--metric FILE.py:FUNCTION``: the user's own measure, judged by --max-drop."""
    inputs_path: str | None = None
    """The timed inputs (one sample, an .npz with one array per model input in order), written once by the
    reference job and read by the lean timing workers."""
    unit: str = "same-work"
    """What the timed rounds time (:class:`mobilize.runtimes.base.Unit`)."""
    frames: dict[str, Any] | None = None
    """``--frames``: every timed round also runs each file's frame-to-answer loop
    (:class:`mobilize.camera.loop.FrameTiming`'s JSON); None: no frames."""
    decoding: dict[str, Any] | None = None
    """A causal decoder's run (the ``generation`` task): its lengths and text (:meth:`mobilize.compare.config.
    CompareConfig.decoding`); the jobs go to :mod:`mobilize.compare.decoder_worker`.  None for every other task."""
    timing_bundle: str | None = None
    """A ``run`` job of a torch runtime writes here what the shared timing host needs to time the variant
    (:mod:`mobilize.compare.host`): its prepared module (none for a file), input specs, quantized engine and
    the outputs of its timed sample."""


@dataclasses.dataclass
class Stage:
    name: str
    at: float = dataclasses.field(default_factory=time.monotonic, repr=False)
    """When the worker entered it (``time.monotonic``: one clock for every process on the machine)."""


@dataclasses.dataclass
class Failed:
    stage: str
    message: str
    trace: str = ""
    internal: bool = False
    """True when the failure is a bug in mobilize (not in the model, a runtime or the user's input)."""
    outcome: str | None = None
    """What the error says it is (:meth:`Outcome.for_error`: an engine's refusal is UNSUPPORTED); None: the stage's."""


@dataclasses.dataclass
class ReferenceDone:
    samples: int
    labelled: bool
    correct: list[bool] | None
    """Per sample: the float model's top-1 equals the label."""
    output_names: list[str]
    num_outputs: int
    warning: str | None = None
    """Set when the float model's output does not depend on its input: every accuracy verdict is then VACUOUS."""
    task: dict[str, Any] | None = None
    """The model's task as resolved on the float outputs (mobilize.accuracy.tasks.TaskChoice's JSON)."""
    generation: dict[str, Any] | None = None
    """A causal decoder's facts (the held-out text, parameters, vocabulary, context, the machine's bandwidth)."""


@dataclasses.dataclass
class LintDone:
    """Sent by the reference job after ReferenceDone: it lints the float model while the variants are built."""

    lint: dict[str, Any] | None
    """mobilize.lint's summary and per-layer profile of the float model (no target probes), or None."""
    error: str | None
    """Why the model could not be analysed (a note, never a failed compare)."""
    seconds: float = 0.0


@dataclasses.dataclass
class Built:
    artifact: str
    format: str
    size_bytes: int
    kind: str
    """float | reduced | quantized | changed: what the variant promises against the float model."""
    notes: list[str]
    details: dict[str, Any]
    fidelity: dict[str, Any] | None = None
    """The file vs the module it was exported from (a Verdict's JSON), judged as optimize judges it."""


@dataclasses.dataclass
class Ready:
    runtime: str
    format: str
    kind: str
    load_ms: float
    first_run_ms: float
    comparison: Any
    """mobilize.accuracy.metrics.Comparison of this variant against the float reference."""
    notes: list[str]
    details: dict[str, Any]
    size_bytes: int | None
    measures_latency: bool
    hostable: str | None = None
    """Why the variant cannot be timed in the shared timing host ('' when it can; None: not a torch runtime)."""


@dataclasses.dataclass
class TimerReady:
    """A timing worker has loaded its file and run it once."""

    runtime: str
    torch_loaded: bool
    """Whether torch is in the worker's ``sys.modules`` (a lean worker must say False)."""
    rss_mb: float


@dataclasses.dataclass
class Bench:
    iterations: int
    warmup: int = 0
    """Untimed runs first, at least this many and for at least ``warmup_s`` seconds: after another process's round
    this runtime needs time to reach its steady speed (:data:`mobilize.bench.harness.ROUND_WARMUP_S`)."""
    warmup_s: float = 0.0
    variant: str | None = None
    """Which of a timing host's variants runs the round (None: the worker's only one)."""


@dataclasses.dataclass
class Open:
    """Ask the shared timing host to load a variant (from ``job.timing_bundle`` or ``job.artifact``) and run it
    once; it answers ``TimerReady`` or ``HostedFailed``."""

    name: str
    job: Job


@dataclasses.dataclass
class Close:
    """The timing host closes one variant's session (the others stay)."""

    name: str


@dataclasses.dataclass
class HostedFailed:
    """One hosted variant failed (loading it, or a round); the host and its other variants go on."""

    name: str
    stage: str
    message: str
    trace: str = ""
    internal: bool = False


@dataclasses.dataclass
class Times:
    times_ns: list[int]
    """On the run's unit (:class:`mobilize.runtimes.base.Unit`: the same work for every file by default)."""
    total_ns: int
    rss_mb: float
    file_times_ns: list[int] | None = None
    """The file alone, on inputs converted once (a second, smaller loop right after): only for a file whose
    interface converts; None where the two units are the same call."""
    frame: "FrameRound | None" = None
    """``--frames``: the frame-to-answer loop's round, run right after the others."""
    prefill_ns: int | None = None
    """A decoder's round: its prefill of the prompt (the time to the first token), before the decode steps that
    ``times_ns`` holds (one per token)."""


@dataclasses.dataclass
class FrameRound:
    """One round of a file's frame loop (:mod:`mobilize.camera.loop`), and its control."""

    times_ns: list[int]
    """Frame to answer, per frame: camera frame -> the file's input -> inference -> top-k."""
    total_ns: int
    stage_ns: list[list[int]]
    """Per stage (convert, feed, infer, answer), each frame's time."""
    gap_ns: list[int]
    """The control: the file alone on its own prepared input, with the frame's convert between runs (what the
    loop does between inferences, on a buffer the file does not read): told apart from the file alone, it says
    whether a slower infer stage comes from the pause between runs or from the input the frame path hands over."""
    facts: dict[str, Any]
    """The converter's output layout and dtype, whether the runtime reads its buffer, the first frame's answer."""


@dataclasses.dataclass
class Stop:
    pass
