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
