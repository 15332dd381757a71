"""XNNPACK (ExecuTorch): which ops ExecuTorch's XnnpackPartitioner takes, and into how many partitions.

The model is exported (``torch.export``) and sent through ``to_edge_transform_and_lower`` with
the real XnnpackPartitioner — the same decompositions and checks a ``.pte`` export runs.  By
default the run stops once the partitioner has tagged the graph (XNNPACK's own compilation of
each partition, the slow part, adds nothing to what is supported); ``xnnpack_lower: true``
lowers completely and reads the lowered program with the delegation report of the executorch
exporter.  Ops left out are named with their module path, source line and the partitioner's
own reason where it gives one ("mean.dim only supports averaging 4D tensors").
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
from typing import Any

from mobilize.core.errors import MobilizeError, translate_errors
from mobilize.backends.executorch.delegation import DelegationReport, delegation_report
from mobilize.lowering.graph import op_name, source_location
from mobilize.lint.support import TargetSupport, UnsupportedOp, module_path_from_stack

PACKAGES = ("executorch",)
PIP = "executorch"
HOW = "torch.export + ExecuTorch's XnnpackPartitioner (to_edge_transform_and_lower)"
LABEL = "XNNPACK (ExecuTorch)"
"""How reports name this target."""
FIX = ("replace it with an op XNNPACK takes or move it out of the model (pre/post-processing): every op left "
       "out runs on portable kernels and splits the graph")
"""The advice for an op this target does not take, when the probe has none more specific."""
_WHY_LOGGER = "executorch.backends.xnnpack.partition"
_WHY = re.compile(r"WhyNoPartition: Node (\S+) was not partitioned because (.*)\.$", re.S)
_SKIP = {"getitem", "executorch_call_delegate"}


class _Partitioned(Exception):
    """Raised from inside to_edge_transform_and_lower once the partitioner has tagged the graph."""


def _partition_only(inner: Any) -> Any:
    """A partitioner that runs ``inner`` (decomposition choices included), keeps its tagged program, then stops."""
    from executorch.exir.backend.partitioner import Partitioner

    class PartitionOnly(Partitioner):
        def __init__(self) -> None:
            super().__init__()
            self.result = None

        def ops_to_not_decompose(self, ep):
            return inner.ops_to_not_decompose(ep)

        def partition(self, exported_program):
            self.result = inner.partition(exported_program)
            raise _Partitioned()

    return PartitionOnly()


def _partition(program: Any, why: dict[str, str]) -> Any:
    """The graph module the XnnpackPartitioner tagged, stopping before XNNPACK compiles the partitions."""
    from executorch.exir import to_edge_transform_and_lower

    from mobilize.backends.executorch.partition import xnnpack_partitioner
    from mobilize.lowering.torch_export import quiet_export, stage_error

    wrapper = _partition_only(xnnpack_partitioner([]))  # the exporter's partitioner: the lint predicts what it does
    # decomposition or export-dialect failures: one line naming the op
    with _collect_why(why), translate_errors(lambda exc: stage_error("lower", exc, program), "lowering for XNNPACK"):
        try:
            with quiet_export():
                to_edge_transform_and_lower(program, partitioner=[wrapper])
        except _Partitioned:
            pass
    if wrapper.result is None:
        raise RuntimeError("to_edge_transform_and_lower finished without calling the partitioner")
    return wrapper.result.tagged_exported_program.graph_module


def probe(subject: Any) -> TargetSupport:
    from mobilize.backends.executorch.partition import xnnpack_partitioner
    from mobilize.backends.executorch.stages import lower
    from mobilize.lowering.torch_export import capture

    try:
        program = subject.cache.get("exported_program") or capture(subject.module, subject.example)
    except MobilizeError as exc:
        return TargetSupport("xnnpack", "failed", HOW, partitions=0,
                             summary=f"torch.export cannot capture the model, so ExecuTorch cannot take it: {exc}")
    subject.cache["exported_program"] = program
    why: dict[str, str] = {}
    try:
        if subject.config.xnnpack_lower:
            with _collect_why(why):
                edge = lower(program, [xnnpack_partitioner([])])
            report = delegation_report(edge)
            unsupported = _unsupported(edge.exported_program().graph_module.graph.nodes, why, tagged=False)
            how = HOW + ", lowered"
        else:
            tagged = _partition(program, why)
            report = _report_from_tags(tagged)
            unsupported = _unsupported(tagged.graph.nodes, why, tagged=True)
            how = HOW + ", partitioned (not lowered)"
    except MobilizeError as exc:
        return TargetSupport("xnnpack", "failed", HOW, partitions=0,
                             summary=f"ExecuTorch cannot lower the model for XNNPACK: {exc}")
    partitions = report.delegate_calls
    total = report.total_ops
    status = "ok" if not report.portable_ops and partitions else "partial" if partitions else "failed"
    if not report.portable_ops:
        summary = f"XNNPACK takes all {report.delegated_ops} ops in {partitions} partition(s)"
    else:
        listed = "; ".join(f"{u.op} x{u.count} ({', '.join(m or '(model)' for m in u.modules[:3])})" for u in unsupported)
        summary = (f"XNNPACK takes {report.delegated_ops} of {total} ops in {partitions} partition(s); "
                   f"not taken: {listed}")
    return TargetSupport("xnnpack", status, how, partitions=partitions, ops_total=total,
                         ops_supported=report.delegated_ops, unsupported=unsupported, summary=summary,
                         details={"delegation": report.to_json()})


def _report_from_tags(gm: Any) -> DelegationReport:
    """The executorch exporter's DelegationReport, filled from the partitioner's tags instead of a lowered program."""
    delegated, portable = collections.Counter(), collections.Counter()
    tags, first = set(), None
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        name = op_name(node.target)
        if name in _SKIP or name.endswith("getitem"):
            continue
        tag = node.meta.get("delegation_tag")
        if tag:
            tags.add(tag)
            delegated[name] += 1
        else:
            portable[name] += 1
            if first is None:
                first = {"op": name, **(source_location(node) or {})}
    return DelegationReport("XnnpackBackend", sum(delegated.values()), sum(portable.values()), len(tags),
                            dict(delegated), dict(portable), first, source="partitioner tags (not lowered)")


def _unsupported(nodes: Any, why: dict[str, str], tagged: bool) -> list[UnsupportedOp]:
    groups: dict[str, UnsupportedOp] = {}
    for node in nodes:
        if node.op != "call_function":
            continue
        name = op_name(node.target)
        if name in _SKIP or name.endswith("getitem") or (tagged and node.meta.get("delegation_tag")):
            continue
        path = module_path_from_stack(node.meta.get("nn_module_stack"))
        loc = source_location(node)
        entry = groups.get(name)
        if entry is None:
            entry = groups[name] = UnsupportedOp(name, 0, [], loc["location"] if loc else None,
                                                 why.get(node.name) or "XNNPACK has no partitioner config for this op")
        entry.count += 1
        if path not in entry.modules:
            entry.modules.append(path)
    return list(groups.values())


@contextlib.contextmanager
def _collect_why(why: dict[str, str]):
    """ExecuTorch's partitioner logs "WhyNoPartition: Node X was not partitioned because ..." at DEBUG: keep them."""

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            match = _WHY.match(record.getMessage().strip())
            if match:
                why.setdefault(match.group(1), match.group(2))

    logger = logging.getLogger(_WHY_LOGGER)
    handler, level, propagate = Collect(logging.DEBUG), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
