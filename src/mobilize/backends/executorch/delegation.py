"""The delegation report: which ops a lowered ExecuTorch program runs in its delegate, which fall back.

A `.pte` whose convolutions fall back to portable kernels runs ~300x slower than the
XNNPACK-delegated one (MobileNetV2 here: 2.6 s vs 8 ms), and stock tools say nothing.  This
report counts ops per kind on both sides, names the first unsupported op with its source
line, and turns a mostly-portable program into a plain WARNING.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

from mobilize.core.jsonfile import dumps_measured
from mobilize.lowering.graph import op_name, source_location
from mobilize.profile.core import WARN_BELOW_PERCENT

SIDE_SUFFIX = ".delegation.json"
"""The structured report is written next to the artifact: ``model.pte.delegation.json``."""
HEAVY_OPS = frozenset({"aten.convolution", "aten.conv2d", "aten._convolution", "aten.linear", "aten.addmm",
                       "aten.mm", "aten.bmm", "aten.matmul", "aten.baddbmm"})
"""Ops that carry the compute of conv nets and transformers: any of them outside the delegate is flagged."""
_SKIP = {"getitem", "executorch_call_delegate"}
_BACKEND_NAMES = {"XnnpackBackend": "XNNPACK"}


@dataclasses.dataclass
class DelegationReport:
    backend: str
    """The delegate's backend id (``XnnpackBackend``), or ``none`` when exported without one."""
    delegated_ops: int | None
    """Ops inside delegate calls; None when read from a .pte alone (the delegate payload is opaque)."""
    portable_ops: int
    """Ops that run outside the delegate, on portable (or optimized) kernels."""
    delegate_calls: int
    delegated_by_op: dict[str, int] = dataclasses.field(default_factory=dict)
    portable_by_op: dict[str, int] = dataclasses.field(default_factory=dict)
    first_unsupported: dict[str, Any] | None = None
    """``{"op": "aten.cumsum", "location": "model.py:12", "file": ..., "line": ..., "code": ...}``."""
    source: str = "edge program"
    devtools: dict[str, int] | None = None
    """ExecuTorch's own ``get_delegation_info`` counts, as a cross-check (they include bookkeeping nodes
    such as getitem, so they run higher than the op counts above)."""

    @property
    def total_ops(self) -> int | None:
        return None if self.delegated_ops is None else self.delegated_ops + self.portable_ops

    @property
    def delegated_percent(self) -> float | None:
        total = self.total_ops
        if total is None:
            return None
        return 100.0 * self.delegated_ops / total if total else 100.0

    @property
    def heavy_fallbacks(self) -> dict[str, int]:
        return {op: n for op, n in self.portable_by_op.items() if op in HEAVY_OPS}

    @property
    def backend_name(self) -> str:
        return _BACKEND_NAMES.get(self.backend, self.backend)

    def warning(self) -> str | None:
        """A plain-words WARNING when most compute falls back, else None."""
        heavy = self.heavy_fallbacks
        pct = self.delegated_percent
        if self.portable_ops == 0 or not (heavy or (pct is not None and pct < WARN_BELOW_PERCENT)
                                          or (pct is None and not self.delegate_calls)):
            return None
        if self.backend == "none" or (not self.delegate_calls and not self.delegated_ops):
            return (f"WARNING: no delegate: all {self.portable_ops} ops run on portable kernels (expect a large "
                    f"slowdown); among them {_counts(heavy or self.portable_by_op, limit=6)}")
        if self.delegated_ops is None:
            text = (f"WARNING: {self.portable_ops} ops run on portable kernels beside {self.delegate_calls} "
                    f"{self.backend_name} delegate call(s) (expect a large slowdown)")
        else:
            text = (f"WARNING: only {self.delegated_ops} of {self.total_ops} ops run in {self.backend_name}; "
                    f"{self.portable_ops} fall back to portable kernels (expect a large slowdown)")
        text += f"; not delegated: {_counts(heavy or self.portable_by_op, limit=6)}"
        return text + self._first_text()

    def summary(self) -> str:
        warning = self.warning()
        if warning:
            return warning
        if self.delegated_ops is None:
            return (f"{self.delegate_calls} {self.backend_name} delegate call(s); {self.portable_ops} op(s) on portable "
                    f"kernels" + (f": {_counts(self.portable_by_op)}" if self.portable_ops else ""))
        head = (f"{self.backend_name} runs all {self.delegated_ops} ops (100%)" if not self.portable_ops else
                f"{self.backend_name} runs {self.delegated_ops} of {self.total_ops} ops ({self.delegated_percent:.0f}%)")
        text = f"{head} in {self.delegate_calls} delegate call(s)"
        if self.portable_ops:
            text += f"; {self.portable_ops} fall back to portable kernels: {_counts(self.portable_by_op)}"
        return text + self._first_text()

    def _first_text(self) -> str:
        first = self.first_unsupported
        if not first:
            return ""
        return f". First unsupported: {first['op']}" + (f" at {first['location']}" if first.get("location") else "")

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(total_ops=self.total_ops, delegated_percent=self.delegated_percent,
                    heavy_fallbacks=self.heavy_fallbacks, warning=self.warning())
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "DelegationReport":
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def delegation_report(source: Any) -> DelegationReport:
    """From an EdgeProgramManager, ExportedProgram or GraphModule after lowering, or a .pte/.bpte path
    (its ``.delegation.json`` side file when present, else the program's own instructions)."""
    if isinstance(source, (str, Path)):
        side = Path(str(source) + SIDE_SUFFIX)
        if side.is_file():
            return DelegationReport.from_json(json.loads(side.read_text()))
        return _from_pte(source)
    if hasattr(source, "exported_program"):
        source = source.exported_program()
    graph_module = getattr(source, "graph_module", source)
    return _from_graph(graph_module)


def write_side_file(report: DelegationReport, artifact_path: str | Path) -> Path:
    from mobilize.core.artifact import atomic_write_text

    path = Path(str(artifact_path) + SIDE_SUFFIX)
    atomic_write_text(path, dumps_measured(report.to_json(), indent=2) + "\n")
    return path


def _from_graph(gm: Any) -> DelegationReport:
    delegated, portable = collections.Counter(), collections.Counter()
    backend, calls, first = "none", 0, None
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.name.startswith("lowered_module"):
            lowered = getattr(gm, node.target)
            backend, calls = lowered.backend_id, calls + 1
            for inner in lowered.original_module.graph.nodes:
                name = op_name(inner.target) if inner.op == "call_function" else None
                if name and name not in _SKIP:
                    delegated[name] += 1
        elif node.op == "call_function":
            name = op_name(node.target)
            if name in _SKIP:
                continue
            portable[name] += 1
            if first is None:
                first = {"op": name, **(source_location(node) or {})}
    return DelegationReport(backend, sum(delegated.values()), sum(portable.values()), calls,
                            dict(delegated), dict(portable), first, devtools=_devtools_counts(gm))


def _devtools_counts(gm: Any) -> dict[str, int] | None:
    try:
        from executorch.devtools.backend_debug import get_delegation_info
    except ImportError:  # devtools (pandas, tabulate) not installed: our own counts stand alone
        return None
    info = get_delegation_info(gm)
    return {"delegated_subgraphs": info.num_delegated_subgraphs, "delegated_nodes": info.num_delegated_nodes,
            "non_delegated_nodes": info.num_non_delegated_nodes}


def _from_pte(path: str | Path) -> DelegationReport:
    from mobilize.backends.executorch.pte import program_bytes, read_program

    summary = read_program(program_bytes(path))
    portable = collections.Counter()
    for op, n in summary.kernel_calls.items():
        portable[op_name(op)] += n
    backend = next(iter(summary.delegate_calls), "none")
    first = {"op": op_name(next(iter(summary.kernel_calls)))} if summary.kernel_calls else None
    return DelegationReport(backend, None, sum(portable.values()), sum(summary.delegate_calls.values()),
                            {}, dict(portable), first, source="pte")


def _counts(by_op: dict[str, int], limit: int | None = None) -> str:
    items = sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{op} x{n}" for op, n in items[:limit])
    return text + (f" and {len(items) - limit} more kinds" if limit is not None and len(items) > limit else "")
