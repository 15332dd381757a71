"""The lint types an engine's probe and timing fill in (target support, unsupported ops, the per-layer profile's
rows) and the helpers they share - kept apart from lint's machinery, which asks the engines through their
descriptors, so an engine imports these and nothing else of lint.

    >>> t = TargetSupport("demo", "partial", "the demo partitioner", unsupported=[UnsupportedOp("aten.sort", 1, [""])])
    >>> t.clean, ops_row("features.1"), module_path_from_stack({"a": ("features", None), "b": ("features.1", None)})
    (False, 'features.1 (ops)', 'features.1')
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any


@dataclasses.dataclass
class UnsupportedOp:
    """One op kind a target did not take, with where it comes from in the model."""

    op: str
    count: int
    modules: list[str]
    """Module paths of the nodes running it (``""``: the model's own forward)."""
    location: str | None = None
    reason: str | None = None
    """The backend's own words when it gave any (ExecuTorch's "why not partitioned", the converter's error)."""
    fix: str | None = None
    """A replacement for this op on this target, where one is known."""


@dataclasses.dataclass
class TargetSupport:
    """How one target backend took the model, found by converting or partitioning it for real."""

    target: str
    status: str
    """ok (takes every op), partial (some ops fall back), failed (cannot take the model), unavailable (not installed)."""
    how: str
    """What was tried (``XnnpackPartitioner on the edge program``, ``torch.backends._nnapi converter``)."""
    partitions: int | None = None
    """Pieces the graph splits into on this target (delegate subgraphs, provider runs); None when unknown."""
    ops_total: int | None = None
    ops_supported: int | None = None
    unsupported: list[UnsupportedOp] = dataclasses.field(default_factory=list)
    summary: str = ""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class LayerRow:
    """One row of the per-layer profile: a compute layer with the BN/activation folded into it, or another op."""

    module: str
    kind: str
    """What runs there: ``Conv2d 3x3 dw + BN + ReLU6``, ``Linear``, ``add``."""
    macs: int = 0
    params: int = 0
    activation_bytes: int = 0
    """Bytes of the tensor the row writes (its output), at the profiled input size."""
    mac_share: float = 0.0
    time_ms: float | None = None
    """Measured mean time per run on ONNX Runtime (with ``--data``), None when not measured."""
    time_share: float | None = None
    members: list[str] = dataclasses.field(default_factory=list)
    """Module paths folded into this row (the conv, its BN, its activation)."""

    @property
    def slow_for_macs(self) -> float | None:
        """time share / MAC share: well above 1 means slow for what it computes."""
        if self.time_share is None or self.mac_share <= 0:
            return None
        return self.time_share / self.mac_share


@dataclasses.dataclass
class Profile:
    rows: list[LayerRow]
    total_macs: int
    total_params: int
    input_specs: list[dict[str, Any]]
    peak_activation_bytes: int = 0
    """The largest single activation tensor."""
    timed_on: str | None = None
    """``onnxruntime 1.32.0, 1 thread, 20 runs on data 'digits'`` when per-layer time was measured."""
    total_time_ms: float | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for row, raw in zip(self.rows, data["rows"]):
            raw["slow_for_macs"] = row.slow_for_macs
        return data


OPS_SUFFIX = " (ops)"
"""Row name suffix for the ops a module's own forward runs (``features.1 (ops)``: its residual add)."""


def ops_row(owner: str) -> str:
    """The row name of the ops ``owner``'s own forward runs (``(model) (ops)`` for the model's)."""
    return f"{owner or '(model)'}{OPS_SUFFIX}"


@contextlib.contextmanager
def quiet_torch_logs():
    """torch.export prints the partial graph to sys.stderr when a capture fails, and dynamo logs at WARNING
    ("Unable to find user code corresponding to {u0}"); the probe's result carries the one line that matters."""
    import io

    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
               if name == "torch" or name.startswith("torch.")]
    saved = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for lg, level in saved:
            lg.setLevel(level)


def module_path_from_stack(stack: dict | None) -> str:
    """The innermost module path of a torch.export ``nn_module_stack`` (``""``: the model's own forward)."""
    if not stack:
        return ""
    return str(list(stack.values())[-1][0])
