"""Which BatchNorms can fold into the layer right before them: the graph rules, in one place.

The ``fuse`` pass folds the pairs; lint's ``conv-bn`` rule reports the BNs that cannot fold and why.
A BN folds into the conv (or linear) whose output it alone reads, when neither module is called
more than once: folding rewrites that layer's weights, so every other use of the layer, of its
output or of the BN would see the wrong values.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import torch
from torch import nn

BNS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
FOLD_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d, nn.Linear)


def inherits_forward(module: nn.Module) -> bool:
    """True for a Conv/Linear/BN subclass defined outside ``torch.nn`` (EfficientNet's padded depthwise conv in
    another library) whose ``forward`` is its torch.nn base's: it computes what the base computes, so it folds."""
    if not isinstance(module, FOLD_LAYERS + BNS):
        return False
    base = next(c for c in type(module).__mro__ if c.__module__.startswith("torch.nn"))
    return type(module).forward is base.forward


class FoldTracer(torch.fx.Tracer):
    """torch.fx's tracer, with Conv/Linear/BN subclasses that keep their base's forward kept as modules (the
    stock tracer keeps only torch.nn's own classes and traces a subclass's insides, hiding the pair)."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return super().is_leaf_module(m, qualname) or inherits_forward(m)


def trace_graph(module: nn.Module) -> torch.fx.Graph:
    return FoldTracer().trace(module)


@dataclasses.dataclass(frozen=True)
class Unfolded:
    """A BN that follows no foldable layer in the graph, and what its input comes from."""

    bn: str
    reason: str
    """``custom-forward`` (the layer before it is a Conv/Linear subclass whose forward is its own) or
    ``no-layer`` (its input is another op's output)."""
    layer: str | None
    """The custom-forward layer (``custom-forward``), else None."""
    source: str
    """What produced the BN's input: the module path or the op's name."""


def unfolded(graph: torch.fx.Graph, modules: dict[str, nn.Module], seen: set[str]) -> list[Unfolded]:
    """Every BN called in the graph that is neither folded nor blocked (``seen``), with what feeds it."""
    out = []
    for node in graph.nodes:
        if node.op != "call_module" or not isinstance(modules.get(node.target), BNS) or str(node.target) in seen:
            continue
        prev = node.args[0] if node.args else None
        if not isinstance(prev, torch.fx.Node):
            out.append(Unfolded(str(node.target), "no-layer", None, "a constant"))
            continue
        stack = list((prev.meta.get("nn_module_stack") or {}).values())
        inner = str(stack[-1][0]) if stack else ""
        owner = modules.get(inner)
        if isinstance(owner, FOLD_LAYERS) and not inherits_forward(owner):
            out.append(Unfolded(str(node.target), "custom-forward", inner, inner))
        else:
            source = str(prev.target) if prev.op == "call_module" else getattr(prev.target, "__name__", str(prev.target))
            out.append(Unfolded(str(node.target), "no-layer", None, source))
    return out


def unfolded_text(u: Unfolded, modules: dict[str, nn.Module]) -> str:
    if u.reason == "custom-forward":
        cls = type(modules[u.layer]).__name__
        return (f"{u.bn} after {u.layer}: {cls} subclasses a torch.nn layer but computes its own forward, so "
                f"folding the BN into its weights could change what it computes")
    return f"{u.bn}: its input comes from {u.source}, not from a Conv or Linear module"


@dataclasses.dataclass(frozen=True)
class Blocked:
    """A BN right after a foldable layer that cannot fold into it."""

    bn: str
    layer: str
    reason: str
    """``shared`` (the BN is called more than once), ``conv-shared`` (the layer is), ``conv-output-shared``
    (the layer's output also feeds other ops)."""
    calls: int
    """How many times the shared module is called (1 for ``conv-output-shared``)."""
    node: Any
    """The BN's fx node."""
    layer_node: Any


def bn_folds(graph: torch.fx.Graph, modules: dict[str, nn.Module],
             layers: tuple[type, ...] = FOLD_LAYERS) -> tuple[list[tuple[str, str]], list[Blocked]]:
    """(layer, BN) pairs that fold, and the BNs after a layer of ``layers`` that cannot, in graph order."""
    calls = collections.Counter(n.target for n in graph.nodes if n.op == "call_module")
    pairs: list[tuple[str, str]] = []
    blocked: list[Blocked] = []
    for node in graph.nodes:
        if node.op != "call_module" or not isinstance(modules.get(node.target), BNS) or not node.args:
            continue
        prev = node.args[0]
        if not (isinstance(prev, torch.fx.Node) and prev.op == "call_module"
                and isinstance(modules.get(prev.target), layers)):
            continue
        bn, layer = str(node.target), str(prev.target)
        if calls[bn] > 1:
            blocked.append(Blocked(bn, layer, "shared", calls[bn], node, prev))
        elif calls[layer] > 1:
            blocked.append(Blocked(bn, layer, "conv-shared", calls[layer], node, prev))
        elif len(prev.users) > 1:
            blocked.append(Blocked(bn, layer, "conv-output-shared", 1, node, prev))
        else:
            pairs.append((layer, bn))
    return pairs, blocked


def bn_folds_in_sequentials(module: nn.Module, layers: tuple[type, ...] = FOLD_LAYERS) -> list[tuple[str, str]]:
    """Without a graph (a model FX cannot trace): consecutive (layer, BN) children of an nn.Sequential."""
    pairs = []
    for prefix, seq in module.named_modules():
        if isinstance(seq, nn.Sequential):
            children = list(seq.named_children())
            for (a, first), (b, second) in zip(children, children[1:]):
                if isinstance(first, layers) and isinstance(second, BNS):
                    pairs.append((f"{prefix}.{a}" if prefix else a, f"{prefix}.{b}" if prefix else b))
    return pairs
