"""What compare's parent and its worker processes say to each other: typed messages, no tuples.

    >>> Stage("load")
    Stage(name='load')
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Job:
    """What a worker process is asked to do."""

    kind: str
    """reference | build | run"""
    model: str
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


@dataclasses.dataclass
class Stage:
    name: str


@dataclasses.dataclass
class Failed:
    stage: str
    message: str
    trace: str = ""
    internal: bool = False
    """True when the failure is a bug in mobilize (not in the model, a runtime or the user's input)."""


@dataclasses.dataclass
class ReferenceDone:
    samples: int
    labelled: bool
    correct: list[bool] | None
    """Per sample: the float model's top-1 equals the label."""
    output_names: list[str]
    num_outputs: int
    lint: dict[str, Any] | None = None
    """mobilize.lint's summary and per-layer profile of the float model (no target probes), or None."""
    lint_error: str | None = None
    warning: str | None = None
    """Set when the float model's output does not depend on its input: every accuracy verdict is then VACUOUS."""
    task: dict[str, Any] | None = None
    """The model's task as resolved on the float outputs (mobilize.accuracy.tasks.TaskChoice's JSON)."""


@dataclasses.dataclass
class Built:
    artifact: str
    format: str
    size_bytes: int
    kind: str
    """float | reduced | quantized: what the variant promises against the float model."""
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


@dataclasses.dataclass
class Bench:
    iterations: int
    warmup: int = 0
    """Untimed runs first: after another process's round, this one's weights are out of the caches."""


@dataclasses.dataclass
class Times:
    times_ns: list[int]
    total_ns: int
    rss_mb: float


@dataclasses.dataclass
class Stop:
    pass
