"""The model as ONNX once per lint run, and which module each ONNX Runtime node came from.

The dynamo exporter records each node's module scopes (``pkg.torch.onnx.name_scopes``); the
TorchScript exporter names nodes after them (``/features/features.0/features.0.0/Conv``).  ONNX
Runtime renames the nodes it fuses or re-lays-out after a tensor they write (``relu_3_nchwc``):
such a node is traced back through that tensor to the node that produced it.
"""

from __future__ import annotations

import ast
import re
from typing import Any

_SUFFIXES = re.compile(r"(_nchwc|_fused|_token_\d+|_reorder(_output|_input)?|_output_\d+)+$")


def export_onnx(subject: Any) -> Any:
    """A checked ModelProto of the subject's module (dynamo exporter, TorchScript fallback), made once and cached."""
    if "onnx" not in subject.cache:
        from mobilize.lowering.onnx_export import torch_to_onnx
        from mobilize.lint.support import quiet_torch_logs

        with quiet_torch_logs():
            proto, notes = torch_to_onnx(subject.module, subject.example, opset=None, dynamic_batch=False,
                                         exporter="auto")
        subject.cache["onnx"] = proto
        subject.cache["onnx_notes"] = notes
    return subject.cache["onnx"]


def scope_of(node: Any) -> str | None:
    """The innermost module path of an exported ONNX node; None when the export did not record one."""
    meta = {p.key: p.value for p in node.metadata_props}
    scopes = meta.get("pkg.torch.onnx.name_scopes")
    if scopes:
        try:
            names = ast.literal_eval(scopes)
        except (ValueError, SyntaxError):
            names = []
        if len(names) >= 2:
            return str(names[-2])
        return ""
    if node.name.startswith("/"):
        parts = [p for p in node.name.split("/") if p]
        return parts[-2] if len(parts) >= 2 else ""
    return None


class OnnxScopes:
    """Module paths for the nodes (by name) and tensors of an exported ONNX graph."""

    def __init__(self, proto: Any):
        self.by_node: dict[str, str] = {}
        self.by_tensor: dict[str, str] = {}
        for node in proto.graph.node:
            scope = scope_of(node)
            if scope is None:
                continue
            self.by_node[node.name] = scope
            for out in node.output:
                self.by_tensor[out] = scope

    def module_of(self, name: str, outputs: list[str] | tuple[str, ...] = ()) -> str | None:
        """The module a (possibly ONNX Runtime-renamed) node belongs to; None when it cannot be traced back."""
        for candidate in (name, _SUFFIXES.sub("", name)):
            if candidate in self.by_node:
                return self.by_node[candidate]
            if candidate in self.by_tensor:
                return self.by_tensor[candidate]
        for out in outputs:
            for candidate in (out, _SUFFIXES.sub("", out)):
                if candidate in self.by_tensor:
                    return self.by_tensor[candidate]
        return None
