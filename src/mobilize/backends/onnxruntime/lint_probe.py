"""ONNX Runtime: export to ONNX, open a session with every execution provider this onnxruntime has, and
read which provider ONNX Runtime assigned each node to.

Nodes the first (preferred) provider did not take fall back to the next one; each provider's
subgraphs are partitions.  The CPU provider runs every ONNX op, so with the stock wheel (CPU
only) the check is whether the model exports and loads at all; the mobile providers (XNNPACK,
NNAPI, CoreML) ship in the Android/iOS packages — where an onnxruntime build has them, they are
tried first.
"""

from __future__ import annotations

import collections
from typing import Any

from mobilize.backends.onnxruntime.sessions import ort_session, session_options
from mobilize.core.errors import MobilizeError, third_party_failure
from mobilize.backends.onnxruntime.onnx_map import OnnxScopes, export_onnx
from mobilize.lint.support import TargetSupport, UnsupportedOp

PACKAGES = ("onnx", "onnxruntime", "onnxscript")
PIP = "onnx onnxruntime onnxscript"
HOW = "torch.onnx export + onnxruntime providers' graph assignment"
LABEL = "ONNX Runtime"
"""How reports name this target."""
FIX = "replace it with an op the preferred provider supports, or accept the CPU fallback"
"""The advice for an op this target does not take, when the probe has none more specific."""
FALLBACK = "CPUExecutionProvider"
_NOT_TRIED = ("AzureExecutionProvider",)
"""Providers that are not a place to run a model's nodes (Azure calls a remote endpoint)."""


def providers(config: Any) -> list[str]:
    import onnxruntime as ort

    available = [p for p in ort.get_available_providers() if p not in _NOT_TRIED]
    wanted = list(config.onnxruntime_providers) or available
    chosen = [p for p in wanted if p in available]
    return chosen + ([FALLBACK] if FALLBACK not in chosen and FALLBACK in available else [])


def probe(subject: Any) -> TargetSupport:
    import onnxruntime as ort

    from mobilize.backends.onnxruntime.runtime import describe_load_error

    try:
        proto = export_onnx(subject)
    except MobilizeError as exc:
        return TargetSupport("onnxruntime", "failed", HOW, partitions=0, summary=f"the model does not export to ONNX: {exc}")
    chosen = providers(subject.config)
    opts = session_options(config={"session.record_ep_graph_assignment_info": "1"})
    opts.log_severity_level = 4  # fatal only: a load error is the exception below, not also a coloured log line
    with third_party_failure("ONNX Runtime session") as failed:  # Fail, InvalidGraph ...: the message says which node
        session = ort_session(proto, opts, providers=chosen)
    if failed:
        from pathlib import Path

        reason = describe_load_error(Path("model.onnx"), failed.error).replace(
            "ONNX Runtime could not load model.onnx: ", "")
        return TargetSupport("onnxruntime", "failed", HOW, partitions=0,
                             summary=f"ONNX Runtime cannot load the exported model: {reason}",
                             details={"providers_tried": chosen})
    nodes_by_ep: collections.Counter = collections.Counter()
    subgraphs_by_ep: collections.Counter = collections.Counter()
    fallback_nodes = []
    for sub in session.get_provider_graph_assignment_info():
        nodes = sub.get_nodes()
        nodes_by_ep[sub.ep_name] += len(nodes)
        subgraphs_by_ep[sub.ep_name] += 1
        if sub.ep_name != chosen[0]:
            fallback_nodes += nodes
    total = sum(nodes_by_ep.values())
    # The CPU provider records one subgraph per node: the nodes it runs count as one partition.
    partitions = sum(n for ep, n in subgraphs_by_ep.items() if ep != FALLBACK) + (1 if nodes_by_ep[FALLBACK] else 0)
    unsupported = _unsupported(fallback_nodes, OnnxScopes(proto), chosen[0])
    notes = list(subject.cache.get("onnx_notes", []))
    if chosen == [FALLBACK]:
        notes.append(f"this onnxruntime {ort.__version__} build has only {FALLBACK} (available: "
                     f"{', '.join(ort.get_available_providers())}), which runs every ONNX op; the mobile providers "
                     f"(XNNPACK, NNAPI, CoreML) are in the Android/iOS packages and could not be tried here")
    first = chosen[0]
    taken = nodes_by_ep[first]
    summary = (f"ONNX Runtime assigns all {total} nodes to {first} ({partitions} partition(s))" if taken == total else
               f"ONNX Runtime assigns {taken} of {total} nodes to {first}, the rest to "
               f"{', '.join(ep for ep in nodes_by_ep if ep != first)} ({partitions} partition(s))")
    return TargetSupport("onnxruntime", "ok" if taken == total else "partial", HOW, partitions=partitions,
                         ops_total=total, ops_supported=taken, unsupported=unsupported, summary=summary,
                         details={"providers_tried": chosen, "nodes_by_provider": dict(nodes_by_ep),
                                  "subgraphs_by_provider": dict(subgraphs_by_ep),
                                  "onnxruntime_version": ort.__version__},
                         notes=notes)


def _unsupported(nodes: list, scopes: OnnxScopes, preferred: str) -> list[UnsupportedOp]:
    groups: dict[str, UnsupportedOp] = {}
    for node in nodes:
        entry = groups.setdefault(node.op_type, UnsupportedOp(node.op_type, 0, [], None,
                                                              f"{preferred} did not take it"))
        entry.count += 1
        path = scopes.module_of(node.name)
        if path is not None and path not in entry.modules:
            entry.modules.append(path)
    return list(groups.values())
