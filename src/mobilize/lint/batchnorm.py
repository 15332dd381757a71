"""Rule ``conv-bn``: BatchNorms that fusion cannot fold into the conv (or linear) before them.

A folded BN is free: its scale and shift move into the conv's weights.  It cannot fold when
something sits between them (conv → ReLU → BN), when the conv's raw output is also used
elsewhere, when the BN or the conv module is called more than once, or when the fold itself
fails — which is found by really folding each adjacent pair (``torch.nn.utils.fusion``, what
``fuse_modules`` runs) and comparing it with the unfolded pair on the recorded input shape
(ConvTranspose with groups > 1 fails there).  An unfolded BN is a separate pass over the
activation, and XNNPACK does not take a BN it cannot fuse.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from mobilize.core.errors import headline
from mobilize.lint.graph import BNS, CONVS, ModelView
from mobilize.lint.report import Finding, Rule, Severity
from mobilize.passes.bn_fold import Blocked, bn_folds, bn_folds_in_sequentials, unfolded, unfolded_text

_LOOKBACK = 4
"""How many single-input ops back from a BN to look for the conv that something separates it from."""


def check(view: ModelView) -> list[Finding]:
    shared = [p for p, m in view.modules.items() if isinstance(m, BNS) and view.calls(p) > 1]
    findings = [_finding(view, path, "shared", f"{type(view.modules[path]).__name__} is called {view.calls(path)} "
                                               f"times: one BN cannot fold into several convs",
                         "give each conv its own BatchNorm (BN statistics are per use anyway)") for path in shared]
    if view.gm is None:
        pairs = bn_folds_in_sequentials(view.module)
    else:
        pairs, blocked = bn_folds(view.gm.graph, view.modules)
        blocked = [b for b in blocked if b.reason != "shared"]  # said once per module above
        findings += [_blocked(view, b) for b in blocked]
        seen = {bn for _, bn in pairs} | {b.bn for b in blocked} | set(shared)
        custom = [u for u in unfolded(view.gm.graph, view.modules, seen) if u.reason == "custom-forward"]
        findings += [_finding(view, u.bn, "custom-forward", unfolded_text(u, view.modules),
                              f"if {u.layer}'s forward computes what its base class does, drop the override (or fold "
                              f"the BN by hand); else keep the BN", layer=u.layer) for u in custom]
        findings += _separated(view, seen | {u.bn for u in custom})
    for layer, bn in pairs:
        reason = _try_fold(view, layer, bn)
        if reason:
            findings.append(_finding(view, bn, "fold-fails",
                                     f"folding into {type(view.modules[layer]).__name__} {layer} fails: {reason}",
                                     _fold_fix(view.modules[layer]), layer=layer))
    return findings


def _blocked(view: ModelView, b: Blocked) -> Finding:
    name = f"{type(view.modules[b.layer]).__name__} {b.layer}"
    if b.reason == "conv-shared":
        return _finding(view, b.bn, "conv-shared", f"the {name} before it is called {b.calls} times, so its weights "
                                                   f"cannot absorb this BN", "give each use its own conv module",
                        layer=b.layer, node=b.node)
    others = sorted(view.op_name(u) + (f" {u.target}" if u.op == "call_module" else "")
                    for u in b.layer_node.users if u is not b.node)
    return _finding(view, b.bn, "conv-output-shared", f"the output of {name} also feeds {', '.join(others)}: the "
                                                      f"unfolded value is needed, so the BN cannot fold",
                    "take the other branch after the BN, or give it its own conv", layer=b.layer, node=b.node)


def _separated(view: ModelView, seen: set[str]) -> list[Finding]:
    """BNs a few single-input ops after a conv: something sits between them (lint's own rule; fuse needs adjacency)."""
    findings = []
    for node in view.nodes:
        if not isinstance(view.module_of(node), BNS) or str(node.target) in seen or not node.args:
            continue
        between = _conv_upstream(view, node.args[0])
        if between is not None:
            conv, ops = between
            findings.append(_finding(view, str(node.target), "between",
                                     f"{' -> '.join(ops)} sits between {type(view.modules[conv]).__name__} {conv} and "
                                     f"this BN, so it cannot fold into the conv",
                                     f"move the BN directly after {conv} (conv -> BN -> activation)",
                                     layer=conv, node=node))
    return findings


def _conv_upstream(view: ModelView, node) -> tuple[str, list[str]] | None:
    """(conv path, ops between) when a conv is a few single-input ops upstream of ``node``."""
    ops: list[str] = []
    for _ in range(_LOOKBACK):
        if not isinstance(node, torch.fx.Node) or node.op in ("placeholder", "get_attr"):
            return None
        m = view.module_of(node)
        if isinstance(m, CONVS + (nn.Linear,)):
            return str(node.target), list(reversed(ops))
        if isinstance(m, BNS):
            return None
        inputs = [a for a in node.all_input_nodes if view.is_tensor(a) or a.op != "get_attr"]
        if len(inputs) != 1:
            return None
        ops.append(view.op_name(node) + (f" {node.target}" if node.op == "call_module" else ""))
        node = inputs[0]
    return None


def _try_fold(view: ModelView, layer_path: str, bn_path: str) -> str | None:
    """Fold a copy of the pair and compare it with the unfolded pair; the reason it fails, or None."""
    from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

    layer, bn = view.modules[layer_path], view.modules[bn_path]
    shapes = view.stats[layer_path].input_shapes
    if not shapes:
        return None
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(_small(layer, shapes[0]), generator=gen)
    a, b = copy.deepcopy(layer).eval(), copy.deepcopy(bn).eval()
    try:
        with torch.no_grad():
            reference = b(a(x))
            fused = (fuse_linear_bn_eval(a, b) if isinstance(a, nn.Linear) else
                     fuse_conv_bn_eval(a, b, transpose=isinstance(a, (nn.ConvTranspose1d, nn.ConvTranspose2d,
                                                                        nn.ConvTranspose3d))))
            out = fused(x)
    except (RuntimeError, AssertionError, ValueError) as exc:  # the fuser's own shape checks and tensor errors
        return headline(exc)
    scale = float(reference.abs().max()) or 1.0
    err = float((out - reference).abs().max()) if out.shape == reference.shape else float("inf")
    return None if err <= 1e-4 * scale else f"the folded layer differs by {err:.3g} (max |output| {scale:.3g})"


def _small(layer: nn.Module, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The recorded input shape, batch 1 and spatial dims cut to a few kernel widths: folding is per channel."""
    if not isinstance(layer, CONVS):
        return (1, *shape[1:])
    reach = max(k * d for k, d in zip(layer.kernel_size, layer.dilation)) + 1
    cap = max(8, reach)
    return (1, shape[1], *(min(d, cap) for d in shape[2:]))


def _fold_fix(layer: nn.Module) -> str:
    if isinstance(layer, CONVS) and layer.groups > 1 and "Transpose" in type(layer).__name__:
        return "use groups=1 for the transposed conv, or fold this BN by hand (per-group weight layout)"
    return "fold the BN by hand, or keep it and accept a separate pass over the activation"


def _finding(view: ModelView, bn_path: str, reason: str, message: str, fix: str, layer: str | None = None,
             node=None) -> Finding:
    st = view.stats.get(bn_path)
    numbers = {"reason": reason, "activation_bytes": st.output_bytes if st else 0}
    if layer:
        numbers["layer"] = layer
    return Finding(Rule.CONV_BN, Severity.WARN, bn_path, message, fix, numbers,
                   location=view.location(node) if node is not None else None)
