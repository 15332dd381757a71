"""``fuse``: find every Conv-BN(-ReLU), Conv-ReLU and Linear-ReLU by itself and fold it.

Patterns are found on the traced dataflow graph (torch.fx), so nested modules, ``nn.Sequential``
and hand-written ``forward`` methods all work without module names.  Folding uses
``torch.ao.quantization.fuse_modules`` (BN folded into the conv weights; ReLU kept as a fused
``ConvReLU2d`` / ``LinearReLU`` that quantized engines run as one kernel).  What is not fused
is said, with the reason.  Models FX cannot trace fall back to consecutive modules inside
``nn.Sequential`` containers, with a note.
"""

from __future__ import annotations

import collections
import dataclasses

import torch
from torch import nn

from mobilize.core.errors import ConfigError, clip, third_party_failure
from mobilize.passes import PASSES
from mobilize.passes.bn_fold import BNS as _BNS, bn_folds, trace_graph, unfolded, unfolded_text
from mobilize.passes.base import Context, Pass, PassConfig

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_RELU_FUNCS = {torch.relu, torch.nn.functional.relu, torch.relu_}


@dataclasses.dataclass(frozen=True)
class FuseConfig(PassConfig):
    linear_relu: bool = True
    """Also fuse Linear followed by ReLU."""


@dataclasses.dataclass
class Found:
    groups: list[list[str]] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)


@PASSES.register("fuse")
class Fuse(Pass):
    name = "fuse"
    Config = FuseConfig

    def requires(self, ctx: Context) -> None:
        if "quantize" in ctx.applied:
            raise ConfigError("step 'fuse' comes after 'quantize': the model is already quantized",
                              hint="put fuse before quantize in the recipe")

    def run(self, module: nn.Module, ctx: Context) -> nn.Module:
        was_training = module.training
        module.eval()
        with third_party_failure("fuse: FX tracing") as failed:  # data-dependent control flow, unsupported Python
            graph = trace_graph(module)
        if failed:
            ctx.note(self.name, f"model is not FX-traceable ({clip(failed.reason, 120)}); fused only consecutive modules "
                                f"inside nn.Sequential containers")
            found = find_in_sequentials(module, self.config.linear_relu)
        else:
            found = find_patterns(module, graph, self.config.linear_relu)
        if found.groups:
            torch.ao.quantization.fuse_modules(module, found.groups, inplace=True,
                                               fuse_custom_config_dict=_subclass_fusers(module, found.groups))
        c = found.counts
        ctx.note(self.name, f"fused {c['conv_bn']} Conv-BN ({c['conv_bn_relu']} with ReLU), "
                            f"{c['conv_relu']} Conv-ReLU, {c['linear_relu']} Linear-ReLU")
        for reason in found.skipped:
            ctx.note(self.name, f"not fused: {reason}")
        ctx.fused = dict(c)
        return module.train(was_training)


def _subclass_fusers(module: nn.Module, groups: list[list[str]]) -> dict:
    """fuse_modules looks fusers up by exact type: a Conv subclass that keeps its base's forward (found by
    :class:`~mobilize.passes.bn_fold.FoldTracer`) is fused by its base's fuser."""
    from torch.ao.quantization.fuser_method_mappings import _DEFAULT_OP_LIST_TO_FUSER_METHOD as defaults

    modules = dict(module.named_modules())
    extra = {}
    for group in groups:
        types = tuple(type(modules[n]) for n in group)
        bases = tuple(next(c for c in t.__mro__ if c.__module__.startswith("torch.nn")) for t in types)
        if types != bases and bases in defaults:
            extra[types] = defaults[bases]
    return {"additional_fuser_method_mapping": extra} if extra else None


def _relu_user(node: torch.fx.Node, modules: dict[str, nn.Module]) -> tuple[torch.fx.Node | None, str]:
    """The node's only user if it is a ReLU: (node, 'module'|'function'|'relu6'|'')."""
    if len(node.users) != 1:
        return None, ""
    user = next(iter(node.users))
    if user.op == "call_module":
        m = modules.get(user.target)
        if type(m) is nn.ReLU:
            return user, "module"
        if type(m) is nn.ReLU6:
            return user, "relu6"
    if user.op == "call_function" and user.target in _RELU_FUNCS:
        return user, "function"
    if user.op == "call_method" and user.target in ("relu", "relu_"):
        return user, "function"
    return None, ""


def find_patterns(module: nn.Module, graph: torch.fx.Graph, linear_relu: bool) -> Found:
    modules = dict(module.named_modules())
    calls = collections.Counter(n.target for n in graph.nodes if n.op == "call_module")
    pairs, blocked = bn_folds(graph, modules, _CONVS)
    bn_after = dict(pairs)
    found = Found()
    found.skipped = [f"{b.layer} + {b.bn}: a module is called more than once" if b.reason != "conv-output-shared"
                     else f"{b.layer}: its output feeds more than one op, so BN cannot be folded" for b in blocked]
    seen = {bn for _, bn in pairs} | {b.bn for b in blocked}
    found.skipped += [unfolded_text(u, modules) for u in unfolded(graph, modules, seen)]
    held = {b.layer for b in blocked}
    used: set[str] = set()
    for node in graph.nodes:
        if node.op != "call_module" or node.target in used or node.target in held:
            continue
        m = modules.get(node.target)
        if isinstance(m, _CONVS) and node.target in bn_after:
            bn = next(iter(node.users))
            group = [node.target, bn.target]
            relu, kind = _relu_user(bn, modules)
            if kind == "module" and calls[relu.target] == 1:
                group.append(relu.target)
                found.counts["conv_bn_relu"] += 1
            elif kind == "module":
                found.skipped.append(f"ReLU after {bn.target} is the module '{relu.target}', called "
                                     f"{calls[relu.target]} times, kept separate; give each use its own nn.ReLU")
            elif kind == "function":
                found.skipped.append(f"ReLU after {bn.target} is a function call (F.relu), kept separate; "
                                     f"use an nn.ReLU module to fuse it")
            elif kind == "relu6":
                found.skipped.append(f"ReLU6 after {bn.target} kept separate (quantized engines fuse only ReLU)")
            found.counts["conv_bn"] += 1
            found.groups.append(group)
            used.update(group)
        elif isinstance(m, _CONVS) or (isinstance(m, nn.Linear) and linear_relu):
            relu, kind = _relu_user(node, modules)
            if kind == "module" and calls[node.target] == 1 and calls[relu.target] == 1:
                found.groups.append([node.target, relu.target])
                found.counts["conv_relu" if isinstance(m, _CONVS) else "linear_relu"] += 1
                used.update([node.target, relu.target])
    return found


def find_in_sequentials(module: nn.Module, linear_relu: bool) -> Found:
    """Fallback: consecutive Conv, BN, ReLU (or Linear, ReLU) children of nn.Sequential."""
    found = Found()
    for prefix, seq in module.named_modules():
        if not isinstance(seq, nn.Sequential):
            continue
        children = list(seq.named_children())
        i = 0
        while i < len(children):
            name, child = children[i]
            full = lambda n: f"{prefix}.{n}" if prefix else n  # noqa: E731
            nxt = children[i + 1][1] if i + 1 < len(children) else None
            nxt2 = children[i + 2][1] if i + 2 < len(children) else None
            if isinstance(child, _CONVS) and isinstance(nxt, _BNS):
                group = [full(name), full(children[i + 1][0])]
                if type(nxt2) is nn.ReLU:
                    group.append(full(children[i + 2][0]))
                    found.counts["conv_bn_relu"] += 1
                found.counts["conv_bn"] += 1
            elif isinstance(child, _CONVS) and type(nxt) is nn.ReLU:
                group = [full(name), full(children[i + 1][0])]
                found.counts["conv_relu"] += 1
            elif linear_relu and isinstance(child, nn.Linear) and type(nxt) is nn.ReLU:
                group = [full(name), full(children[i + 1][0])]
                found.counts["linear_relu"] += 1
            else:
                i += 1
                continue
            found.groups.append(group)
            i += len(group)
    return found
