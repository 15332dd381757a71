"""Accuracy in the model's own task: which task a model does (given with ``--task`` or guessed from its
outputs, and said which), the measure its users read, and the budget verdict on that measure.

=============== ============================================================= ========================
task            measure (vs the float model on the same samples)              budget
=============== ============================================================= ========================
classification  top-1 agreement and flips; top-1 vs labels                    ``--max-drop`` top-1
                                                                              points (labelled), else
                                                                              ``--min-cosine``
embedding       cosine; neighbour recall@5 (1-NN label accuracy with labels)  ``--min-cosine``
detection       boxes matched at IoU 0.5 (F1 over all boxes), recall,         ``--max-drop`` points
                precision, mAP@0.5, matched IoU and score diffs
segmentation    mask IoU (mean over classes) and pixel agreement              ``--max-drop`` points
sequence (CTC)  greedy-decode exact-sequence match, edit-distance agreement   ``--max-drop`` points
raw             SQNR and cosine only                                          ``--min-cosine``
--metric f      the user's ``f(outputs, reference_outputs, labels) -> float`` ``--max-drop`` in f's
                                                                              units
=============== ============================================================= ========================

The correctness floor (SQNR per kind, one :class:`~mobilize.accuracy.verify.Policy`) is the same for every task.

    >>> import torch
    >>> torch.manual_seed(0) is not None
    True
    >>> outs = [[torch.nn.functional.normalize(torch.randn(1, 128), dim=1)] for _ in range(8)]
    >>> guess_task(outs).describe()
    'task: embedding (guessed from output shape (1,128), rows of norm 1; --task to override)'
    >>> m = measure_task(Task.EMBEDDING, outs, outs, None)
    >>> m.measure, m.value
    ('neighbour recall@5', 100.0)
"""

from __future__ import annotations

import dataclasses
import enum
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from mobilize.accuracy import task_measures
from mobilize.accuracy.metrics import Comparison, as_float64
from mobilize.core.errors import ConfigError, UserError


class Task(enum.StrEnum):
    CLASSIFICATION = "classification"
    EMBEDDING = "embedding"
    DETECTION = "detection"
    SEGMENTATION = "segmentation"
    SEQUENCE = "sequence"
    RAW = "raw"
    GENERATION = "generation"
    """A causal LM: decoder files timed in tokens and judged token by token (:mod:`mobilize.compare.decoder_worker`)."""


MEASURES: dict[Task, tuple[str, str, str, Callable | None]] = {
    Task.EMBEDDING: ("neighbour recall@5", "nn@5 %", "cosine", task_measures.embedding),
    Task.DETECTION: ("boxes matched at IoU 0.5", "boxes %", "budget-box-drop", task_measures.detection),
    Task.SEGMENTATION: ("mask IoU", "mIoU %", "budget-mask-iou-drop", task_measures.segmentation),
    Task.SEQUENCE: ("exact sequences", "seq %", "budget-sequence-drop", task_measures.sequence),
}
"""Per task: the measure's name, its table column, the budget rule (``cosine``: judged by --min-cosine, the measure
reported beside it) and the function computing it."""


@dataclasses.dataclass(frozen=True)
class TaskChoice:
    task: Task
    given: bool
    why: str
    """What the guess was made from (the output's shape, name or values)."""
    reading: str | None = None
    """How the task's measure reads the float model's outputs, where it could read them more than one way (a
    detection layout: ``read as (1,4+C,N) columns (YOLOv8) ...``)."""

    def describe(self) -> str:
        read = f"; {self.reading}" if self.reading else ""
        if self.given:
            return f"task: {self.task} (given with --task){read}"
        return f"task: {self.task} (guessed from {self.why}; --task to override){read}"

    def to_json(self) -> dict[str, Any]:
        return {"name": str(self.task), "given": self.given, "why": self.why, "reading": self.reading,
                "text": self.describe()}


SEG_MAX_CLASSES = 200
"""The most channels a (1,C,h,w) output is read as per-pixel class scores with (ADE20K 150, COCO-stuff 182)."""

SEG_STRIDES = (1, 2, 4, 8)
"""The strides a segmentation head's scores come at against the image (SegFormer: 4; DeepLab's logits: 8)."""


def guess_task(reference: Sequence[Sequence[Any]], labels: Sequence[int] | None = None,
               names: Sequence[str] | None = None, input_shapes: Sequence[Sequence[int]] | None = None) -> TaskChoice:
    """The task the float model's outputs look like (first sample's shapes, output names, values; ``input_shapes``:
    the first sample's inputs', which tell per-pixel class scores from a feature map)."""
    from mobilize.core.inputs import shape_text

    first = [as_float64(t) for t in reference[0]]
    shapes = [tuple(t.shape) for t in first]
    name = (list(names or [])[:1] or [""])[0].lower()
    where = f"output shape {shape_text(shapes[0])}" if len(first) == 1 else \
        f"output shapes {', '.join(shape_text(s) for s in shapes)}"
    boxes = [t for t in first if t.dim() >= 2 and t.shape[-1] == 4]
    if len(first) >= 2 and boxes and any(t.numel() * 4 == boxes[0].numel() for t in first):
        return TaskChoice(Task.DETECTION, False, f"{where}: boxes (…,N,4) beside N scores")
    for hint, task in (("emb", Task.EMBEDDING), ("box", Task.DETECTION), ("mask", Task.SEGMENTATION),
                       ("seg", Task.SEGMENTATION), ("logit", Task.CLASSIFICATION), ("class", Task.CLASSIFICATION)):
        if hint in name:
            return TaskChoice(task, False, f"output name '{name}' of shape {shape_text(shapes[0])}")
    if len(first) >= 2:  # several heads (a face detector's box offsets, landmarks, face probability): each guessed
        heads = [_head(t) for t in first]
        said = f"{where}: {'; '.join(text for _, text in heads)}"
        kinds = [kind for kind, _ in heads]
        if kinds[0] == "regression" and "classification" in kinds:  # the classes are elsewhere: top-1 reads the
            return TaskChoice(Task.RAW, False, said + "; every head judged by its error, not top-1")  # first output
        if kinds[0] == "classification":
            return TaskChoice(Task.CLASSIFICATION, False, said + "; top-1 on the first head, the rest by error")
    t = first[0]
    dims = [d for d in t.shape if d != 1]
    rows = t.reshape(-1, t.shape[-1]) if t.dim() else t.reshape(1, 1)
    if t.numel() <= 1:
        return TaskChoice(Task.RAW, False, f"{where}: one value")
    if len(dims) == 1:
        width = dims[0]
        if labels and 0 <= min(labels) and max(labels) < width <= 2 * (max(labels) + 1):  # one column per class
            return TaskChoice(Task.CLASSIFICATION, False, f"{where} and labels {min(labels)}-{max(labels)}")
        norms = [float(as_float64(s[0]).norm()) for s in reference]
        if all(abs(n - 1.0) < 1e-3 for n in norms):
            return TaskChoice(Task.EMBEDDING, False, f"{where}, rows of norm 1")
        if _probabilities(rows):
            return TaskChoice(Task.CLASSIFICATION, False, f"{where}, rows of probabilities")
        if width >= 64 and width % 32 == 0:
            return TaskChoice(Task.EMBEDDING, False, where)
        return TaskChoice(Task.CLASSIFICATION, False, where)
    if t.dim() == 3 and len(dims) == 2 and (_probabilities(rows) or _probabilities(rows.exp())):
        return TaskChoice(Task.SEQUENCE, False, f"{where}, per-step (log-)probabilities")
    if (seg := _per_pixel_scores(t, input_shapes)) is not None:
        return TaskChoice(Task.SEGMENTATION, False, f"{where}: {seg}; each pixel's arg-max is its class")
    # (1,N,4+1+C) boxes, hidden states and feature maps all look alike: only --task (or an output name) tells them
    # apart, so they are compared as raw outputs, never as classes
    return TaskChoice(Task.RAW, False, where)


def _per_pixel_scores(t, input_shapes: Sequence[Sequence[int]] | None) -> str | None:
    """How a (1,C,h,w) output reads as per-pixel class scores (issue #67: a SegFormer's logits at a quarter of its
    image were judged raw, and an int8 file losing 15.5 mask-IoU points was recommended), or None: 2 to
    :data:`SEG_MAX_CLASSES` channels of signed scores (not a ReLU's feature map) at 1, 1/2, 1/4 or 1/8 of an
    image input's height and width (not a backbone's 1/32).

    >>> import torch
    >>> _per_pixel_scores(torch.randn(1, 19, 32, 32), [(1, 3, 128, 128)])
    '19 signed per-pixel scores at 1/4 of the 128x128 input'
    >>> _per_pixel_scores(torch.randn(1, 512, 4, 4), [(1, 3, 128, 128)]) is None  # a backbone's features
    True
    """
    if t.dim() != 4 or t.shape[0] != 1 or not 2 <= t.shape[1] <= SEG_MAX_CLASSES or not bool((t < 0).any()):
        return None
    h, w = int(t.shape[2]), int(t.shape[3])
    for shape in input_shapes or []:
        if len(shape) != 4:
            continue
        height, width = int(shape[-2]), int(shape[-1])
        for stride in SEG_STRIDES:
            if h in (height // stride, -(-height // stride)) and w in (width // stride, -(-width // stride)):
                at = "the full size" if stride == 1 else f"1/{stride}"
                return f"{t.shape[1]} signed per-pixel scores at {at} of the {height}x{width} input"
    return None


REGRESSION_WIDTH = 16
"""A head of at most this many values that are not probabilities, beside a head of class probabilities, is read as
regression values (box offsets: 4, landmarks: 10), not class scores."""


def _head(t) -> tuple[str, str]:
    """What one output of a multi-head model looks like: ``classification`` (rows of probabilities),
    ``regression`` (a few values that are not probabilities: judged by error), else ``other``; and a phrase."""
    from mobilize.core.inputs import shape_text

    shape = shape_text(tuple(t.shape))
    dims = [d for d in t.shape if d != 1]
    if t.numel() <= 1 or len(dims) != 1:
        return "other", f"{shape} other"
    rows = t.reshape(-1, t.shape[-1])
    if dims[0] >= 2 and _probabilities(rows):
        return "classification", f"{shape} class probabilities"
    if dims[0] <= REGRESSION_WIDTH:
        return "regression", f"{shape} regression values"
    return "other", f"{shape} other"


def _probabilities(rows) -> bool:
    return bool((rows >= 0).all()) and bool(((rows.sum(-1) - 1).abs() < 1e-3).all())


def resolve_task(given: str | None, reference, labels=None, names=None, input_shapes=None) -> TaskChoice:
    """``--task`` when given (checked), else the guess."""
    if given is None:
        return guess_task(reference, labels, names, input_shapes)
    try:
        return TaskChoice(Task(given), True, "--task")
    except ValueError:
        raise ConfigError(f"unknown --task '{given}'", hint=f"choose one of: {', '.join(Task)}") from None


@dataclasses.dataclass
class TaskMeasure:
    """The task's measure of one candidate against the float model."""

    task: str
    measure: str
    """Its name as the report prints it: ``neighbour recall@5``, ``mask IoU``, or the user's metric."""
    column: str
    """Its short table heading."""
    rule: str
    """The budget rule that decides (``budget-box-drop`` ...), or ``cosine`` when --min-cosine decides."""
    value: float | None
    """The candidate's figure (percent for the built-in measures; the user's metric in its own units)."""
    reference: float | None
    """The float model's figure on the same samples (100 for the built-in agreement measures)."""
    percent: bool = True
    per_sample: list[float] = dataclasses.field(default_factory=list)
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    weights: list[float] | None = None
    """Each sample's weight in ``value`` (detection: its boxes, so the value is F1 over all boxes and an image
    where neither model finds a box counts nothing); None: every sample alike."""

    @property
    def drop(self) -> float | None:
        return None if self.value is None or self.reference is None else self.reference - self.value

    def drop_ci(self) -> tuple[float, float] | None:
        if not self.per_sample or self.reference is None:
            return None
        from mobilize.accuracy.stats import mean_ci, weighted_mean_ci

        drops = [self.reference - v for v in self.per_sample]
        return mean_ci(drops) if self.weights is None else weighted_mean_ci(drops, self.weights)

    def text(self) -> str:
        if self.value is None:
            return f"{self.measure}: not measured ({self.details.get('note', 'no value')})"
        unit = "%" if self.percent else ""
        return f"{self.measure} {self.value:.{1 if self.percent else 4}f}{unit}"

    def to_json(self) -> dict[str, Any]:
        ci = self.drop_ci()
        return {"task": self.task, "measure": self.measure, "column": self.column, "rule": self.rule,
                "value": self.value, "reference": self.reference, "percent": self.percent, "drop": self.drop,
                "drop_ci95": list(ci) if ci else None,
                "drop_significant": None if ci is None else not (ci[0] <= 0.0 <= ci[1]), **self.details}


def measure_task(task: Task | str, candidate, reference, labels, metric: Callable | None = None,
                 metric_name: str = "metric") -> TaskMeasure | None:
    """The task's measure of ``candidate`` against ``reference`` (None for a classifier without --metric: its
    top-1 figures are in the Comparison)."""
    task = Task(task)
    if metric is not None:
        ref_value = call_metric(metric, metric_name, reference, reference, labels)
        value = call_metric(metric, metric_name, candidate, reference, labels)
        return TaskMeasure(str(task), metric_name, metric_name[:10], "budget-metric-drop", value, ref_value, False)
    if task in (Task.CLASSIFICATION, Task.RAW):
        return None
    name, column, rule, fn = MEASURES[task]
    per, details, *weighted = fn(candidate, reference, labels)
    weights = weighted[0] if weighted else [1.0] * len(per)
    value = None if details.get("note") or not sum(weights) else \
        math.fsum(v * w for v, w in zip(per, weights)) / math.fsum(weights)
    return TaskMeasure(str(task), name, column, rule, value, 100.0, True, per, details,
                       weights[:] if weighted else None)


METRIC_TIMEOUT_S = 120.0
"""A user metric's own time limit (``MOBILIZE_METRIC_TIMEOUT_S`` overrides it): a metric that hangs is stopped
here, not after the stage's 600 s."""


def metric_timeout_s() -> float:
    import os

    try:
        return float(os.environ.get("MOBILIZE_METRIC_TIMEOUT_S", METRIC_TIMEOUT_S))
    except ValueError:
        raise ConfigError(f"MOBILIZE_METRIC_TIMEOUT_S={os.environ['MOBILIZE_METRIC_TIMEOUT_S']!r} is not a number") from None


def call_metric(fn: Callable, name: str, outputs, reference_outputs, labels) -> float:
    """The user's metric on these outputs, under its own time limit; anything it raises or returns other than a
    finite number is the user's."""
    from mobilize.core.deadline import time_limit
    from mobilize.core.errors import headline, translate_errors

    limit = metric_timeout_s()
    expired = lambda: UserError(f"--metric {name} ran past its {limit:g} s limit (a user metric's own limit, not "  # noqa: E731
                                f"the stage's; MOBILIZE_METRIC_TIMEOUT_S sets it)")
    with time_limit(limit, expired), translate_errors(  # the user's own code: what it raises is theirs to fix
            UserError, f"--metric {name}", message=lambda exc: f"--metric {name} raised {type(exc).__name__}: "
                                                                f"{headline(exc)}"):
        value = fn(outputs, reference_outputs, labels)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise UserError(f"--metric {name} returned {type(value).__name__}, not a number") from None
    if not math.isfinite(value):
        raise UserError(f"--metric {name} returned {value}, not a finite number")
    return value


def load_metric(spec: str) -> Callable:
    """``file.py:function`` -> the function (the user's own file, given explicitly: importing it runs it).

    The contract: ``function(outputs, reference_outputs, labels) -> float``, higher is better.  ``outputs`` and
    ``reference_outputs`` are lists with one entry per sample, each the list of the model's output tensors (tuple
    and dict outputs flattened in order, batch of one); ``labels`` is a list of ints or None."""
    import importlib.util

    path, sep, attr = spec.rpartition(":")
    if not sep or not path or not attr.isidentifier():
        raise ConfigError(f"--metric '{spec}' is not FILE.py:FUNCTION", hint="e.g. --metric my_metrics.py:f1")
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--metric file not found: {file}")
    module_spec = importlib.util.spec_from_file_location(f"mobilize_metric_{abs(hash(str(file.resolve())))}", file)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"--metric file {file} is not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    from mobilize.core.errors import headline, translate_errors

    failed = lambda exc: f"importing --metric file {file} failed: {type(exc).__name__}: {headline(exc)}"  # noqa: E731
    with translate_errors(UserError, f"importing --metric file {file}", message=failed):  # the user's own file
        try:
            module_spec.loader.exec_module(module)
        except SystemExit as exc:
            raise UserError(failed(exc)) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"--metric file {file} has no function '{attr}'")
    return fn


def reference_task(given: str | None, metric: str | None, reference, labels=None, names=None,
                   input_shapes=None) -> TaskChoice:
    """The float model's task, checked once on its own outputs: a layout the task cannot read, or a --metric that
    fails, stops the run here (before any variant is built) with one line."""
    choice = resolve_task(given, reference, labels, names, input_shapes)
    m = measure_task(choice.task, reference, reference, labels, load_metric(metric) if metric else None,
                     metric.rpartition(":")[2] if metric else "")
    reading = m.details.get("layout") if m is not None else None
    return dataclasses.replace(choice, reading=reading) if reading else choice


def without_classes(c: Comparison, task: Task | str | None) -> Comparison:
    """``c`` with its top-1 figures (agreement, flips) dropped unless the model is a classifier: they mean nothing
    for embeddings, boxes or masks, and a verdict must not be decided on them (None: unknown, kept)."""
    if task is None:
        return c
    c.task = str(Task(task))
    if c.task != Task.CLASSIFICATION:
        c.top1_agreement = c.chance_agreement = c.correct = None
        c.flips = c.hard_flips = c.near_tie_flips = 0
    return c


def apply_task(c: Comparison, task: Task | str | None, candidate, reference, labels, metric: str | None = None) -> None:
    """Make ``c`` speak the task: classifier figures (top-1, flips) only for a classifier; the task's measure."""
    task = resolve_task(None, reference, labels).task if task is None else Task(task)
    without_classes(c, task)
    if c.shape_error or not c.finite:
        return
    fn = load_metric(metric) if metric else None
    c.task_measure = measure_task(task, candidate, reference, labels, fn, metric.rpartition(":")[2] if metric else "")
