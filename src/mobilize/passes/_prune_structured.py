"""Structured (channel) pruning for ``prune``, on torch-pruning's dependency graph.

torch-pruning traces the model and groups every coupled channel: a conv's outputs with its BatchNorm,
the depthwise conv after it and the input channels of the next conv; all convs whose outputs meet in
a residual add; index offsets through concatenations; the final Linear's inputs.  It rewrites the
layers.  This module decides how many channels each group keeps:

* ``layer`` scope: every group keeps the same fraction of its channels (its own least important
  removed); ``global`` scope: one threshold on importance normalized per group, so groups with many
  weak channels lose more.
* each kept count is a multiple of ``round_to`` (at least ``round_to``), rounded to the nearest one;
* the fraction (or threshold) is searched so that MACs (or parameters) fall by the asked ratio.  The
  search counts the pruned layers' sizes from the dependency groups without pruning; the figures
  reported afterwards are measured on the pruned model.

Layers whose outputs are the model's outputs are never narrowed; grouped (not depthwise) convolutions
are kept whole, with a note.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import torch
from torch import nn

from mobilize.core.errors import BackendUnavailableError

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
ROOT_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


def import_torch_pruning() -> Any:
    try:
        import torch_pruning
    except ImportError as exc:
        raise BackendUnavailableError("structured pruning needs the Python package 'torch-pruning'",
                                      hint="pip install torch-pruning==1.6.1 --no-deps") from exc
    return torch_pruning


def torch_pruning_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch-pruning")
    except PackageNotFoundError:
        return getattr(import_torch_pruning(), "__version__", "unknown")


@dataclasses.dataclass(frozen=True)
class StructuredOptions:
    ratio: float
    """Fraction of the measure to remove."""
    measure: str = "macs"
    """macs or params."""
    scope: str = "layer"
    round_to: int = 8
    ignore: tuple[str, ...] = ()
    """Module names (and their children) kept whole."""


@dataclasses.dataclass
class Plan:
    parameter: float
    """The kept fraction (layer scope) or the importance quantile cut (global scope) the search chose."""
    estimated_reduction_percent: float
    groups_pruned: int
    skipped: dict[str, str]
    """Layer name -> why its channels were kept whole."""


@dataclasses.dataclass
class _Group:
    root: nn.Module
    handler: Callable
    channels: int
    order: torch.Tensor
    """Channel indices, least important first."""
    scores: torch.Tensor


@dataclasses.dataclass
class _Geometry:
    kind: str  # conv, depthwise, linear, bn
    out: int
    inp: int
    groups: int = 1
    kernel: int = 1
    positions: int = 0
    bias: bool = False

    def size(self, out_removed: int, in_removed: int) -> tuple[int, int]:
        """(MACs, params) of this layer with that many output/input channels removed."""
        if self.kind == "bn":
            return 0, 2 * (self.out - out_removed) if self.bias else 0
        if self.kind == "depthwise":
            c = self.out - max(out_removed, in_removed)
            return self.positions * self.kernel * c, c * self.kernel + (c if self.bias else 0)
        o, i = self.out - out_removed, self.inp - in_removed
        per_out = (i // self.groups) * self.kernel
        return self.positions * o * per_out, o * per_out + (o if self.bias else 0)


@dataclasses.dataclass
class Traced:
    """torch-pruning's dependency graph and the layer sizes seen in the same forward pass."""

    graph: Any
    geometry: dict[nn.Module, _Geometry]


def trace(module: nn.Module, inputs: Sequence[Any]) -> Traced:
    """Build the dependency graph (one forward pass with autograd on) and record every Conv/Linear's
    output positions on the way."""
    tp = import_torch_pruning()
    geom = _layer_sizes(module)

    def hook(m: nn.Module, args: tuple, out: Any) -> None:
        if isinstance(out, torch.Tensor):
            geom[m].positions += out.numel() // geom[m].out

    handles = [m.register_forward_hook(hook) for m, g in geom.items() if g.kind != "bn"]
    try:
        with torch.enable_grad():
            graph = tp.DependencyGraph().build_dependency(module, example_inputs=list(inputs), verbose=False)
    finally:
        for h in handles:
            h.remove()
    return Traced(graph, geom)


def output_layers(graph: Any) -> set[nn.Module]:
    """Conv/Linear layers whose output channels reach the model's outputs without passing another
    Conv/Linear (walking back from the graph's sinks): narrowing them would change the output shape."""
    found: set[nn.Module] = set()
    seen: set[int] = set()
    stack = [n for n in graph.module2node.values() if not n.outputs]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node.module, ROOT_TYPES):
            found.add(node.module)
            continue
        stack.extend(node.inputs)
    return found


def _is_grouped(m: nn.Module) -> bool:
    """A grouped convolution torch-pruning cannot narrow without its group layout (depthwise is fine)."""
    if not isinstance(m, _CONVS) or m.groups == 1:
        return False
    return not (m.groups == m.in_channels == m.out_channels)


def _layer_sizes(module: nn.Module) -> dict[nn.Module, _Geometry]:
    geom: dict[nn.Module, _Geometry] = {}
    for m in module.modules():
        if isinstance(m, _CONVS):
            kind = "depthwise" if m.groups == m.in_channels == m.out_channels and m.groups > 1 else "conv"
            geom[m] = _Geometry(kind, m.out_channels, m.in_channels, m.groups, math.prod(m.kernel_size),
                                bias=m.bias is not None)
        elif isinstance(m, nn.Linear):
            geom[m] = _Geometry("linear", m.out_features, m.in_features, bias=m.bias is not None)
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
            geom[m] = _Geometry("bn", m.num_features, m.num_features, bias=m.affine)
    return geom


def prune_channels(module: nn.Module, traced: Traced, options: StructuredOptions,
                   importance: Callable[[Any], torch.Tensor | None], macs_before: int, params_before: int) -> Plan:
    """Narrow ``module`` in place so that its MACs (or params) fall by about ``options.ratio``
    (``macs_before`` / ``params_before``: the whole model's, to express the reduction against): rank each
    dependency group's channels, find the cut whose estimated reduction is closest to the target, prune it."""
    names = {m: n for n, m in module.named_modules()}
    skipped: dict[str, str] = {}
    ignored = _ignored(module, traced.graph, options, names, skipped)
    groups = _ranked_groups(traced.graph, ignored, options, importance, names, skipped)
    estimate = _estimator(traced, groups, options, macs_before, params_before)
    counts_for, grid = _cuts(groups, options)
    best, best_counts, best_estimate = _closest_cut(grid, counts_for, estimate, 100.0 * options.ratio)
    pruned = 0
    for g, n in zip(groups, best_counts):
        if not n:
            continue
        grp = traced.graph.get_pruning_group(g.root, g.handler, g.order[:n].tolist())
        if not traced.graph.check_pruning_group(grp):
            skipped[names.get(g.root, str(g.root))] = "torch-pruning refused the group (it would empty a layer)"
            continue
        grp.prune()
        pruned += 1
    return Plan(best, best_estimate, pruned, skipped)


def _ignored(module: nn.Module, graph: Any, options: StructuredOptions, names: dict, skipped: dict[str, str]) -> set:
    """The layers kept whole: those whose outputs are the model's, and those ``options.ignore`` lists (each said in
    ``skipped``)."""
    protected = output_layers(graph)
    for m in protected:
        skipped[names.get(m, str(m))] = "its outputs are the model's outputs"
    ignored = set(protected)
    for name, m in module.named_modules():
        if name and any(name == p or name.startswith(p + ".") for p in options.ignore):
            if isinstance(m, ROOT_TYPES):
                skipped.setdefault(name, "listed in ignore")
            ignored.add(m)
    return ignored


def _ranked_groups(graph: Any, ignored: set, options: StructuredOptions, importance: Callable[[Any], Any],
                   names: dict, skipped: dict[str, str]) -> list[_Group]:
    """Every dependency group that may be narrowed, its channels ranked by ``importance`` (least first)."""
    groups: list[_Group] = []
    for group in graph.get_all_groups(ignored_layers=list(ignored), root_module_types=list(ROOT_TYPES)):
        root, handler = group[0].dep.target.module, group[0].dep.handler
        grouped = [dep.target.module for dep, _ in group if _is_grouped(dep.target.module)]
        if grouped:
            skipped[names.get(root, str(root))] = (f"coupled to grouped convolution '{names.get(grouped[0])}' "
                                                  f"(groups={grouped[0].groups}), kept whole")
            continue
        channels = graph.get_out_channels(root)
        if channels is None:
            continue
        if channels <= options.round_to:
            skipped[names.get(root, str(root))] = f"{channels} channels, not above round_to ({options.round_to})"
            continue
        scores = importance(group)
        if scores is None:
            continue
        scores = scores.detach().float().cpu()
        groups.append(_Group(root, handler, channels, torch.argsort(scores, stable=True), scores))
    return groups


def _estimator(traced: Traced, groups: list[_Group], options: StructuredOptions, macs_before: int,
               params_before: int) -> Callable[[list[int]], float]:
    """``estimate(counts)``: the percent of the model's MACs (or params) removed by cutting ``counts[i]`` channels
    of group i, from the layers' geometry (each group's expansion computed once)."""
    graph, geom = traced.graph, traced.geometry
    macs_tracked = sum(g.size(0, 0)[0] for g in geom.values())
    params_tracked = sum(g.size(0, 0)[1] for g in geom.values())
    expanded: dict[tuple[int, int], list[tuple[nn.Module, bool, int]]] = {}

    def removals(gi: int, n: int) -> list[tuple[nn.Module, bool, int]]:
        key = (gi, n)
        if key not in expanded:
            g = groups[gi]
            grp = graph.get_pruning_group(g.root, g.handler, g.order[:n].tolist())
            expanded[key] = [(dep.target.module, graph.is_out_channel_pruning_fn(dep.handler), len(idxs))
                             for dep, idxs in grp if dep.target.module in geom]
        return expanded[key]

    def estimate(counts: list[int]) -> float:
        out_rm: dict[nn.Module, int] = {}
        in_rm: dict[nn.Module, int] = {}
        for gi, n in enumerate(counts):
            if n:
                for m, is_out, k in removals(gi, n):
                    target = out_rm if is_out else in_rm
                    target[m] = target.get(m, 0) + k
        macs = params = 0
        for m, g in geom.items():
            a, b = g.size(out_rm.get(m, 0), in_rm.get(m, 0))
            macs, params = macs + a, params + b
        if options.measure == "params":
            return 100.0 * (params_tracked - params) / params_before
        return 100.0 * (macs_tracked - macs) / macs_before

    return estimate


def _cuts(groups: list[_Group], options: StructuredOptions) -> tuple[Callable[[float], list[int]], list[float]]:
    """``counts_for(x)``: channels cut per group at grid point x, and the grid: a global score quantile, or the
    share each group keeps (``options.scope``), each group's width rounded to ``options.round_to``."""
    def kept(channels: int, wanted: float) -> int:
        step = options.round_to
        keep = max(step, int(round(wanted / step)) * step)
        return channels if keep >= channels else keep

    if options.scope == "global":
        everything = torch.cat([g.scores for g in groups]) if groups else torch.zeros(1)

        def counts_for(q: float) -> list[int]:
            cut = torch.quantile(everything, q) if q > 0 else everything.min() - 1
            return [g.channels - kept(g.channels, float((g.scores > cut).sum())) for g in groups]

        return counts_for, [i / 400 for i in range(0, 391)]

    def counts_for_share(s: float) -> list[int]:
        return [g.channels - kept(g.channels, g.channels * s) for g in groups]

    return counts_for_share, [1 - i / 400 for i in range(0, 381)]


def _closest_cut(grid: list[float], counts_for: Callable[[float], list[int]],
                 estimate: Callable[[list[int]], float], target: float) -> tuple[float, list[int], float]:
    """The grid point whose estimated reduction is closest to ``target`` percent (each distinct cut estimated once;
    the walk stops well past the target)."""
    best, best_counts, best_estimate = grid[0], counts_for(grid[0]), 0.0
    seen: set[tuple[int, ...]] = set()
    for x in grid:
        counts = counts_for(x)
        key = tuple(counts)
        if key in seen:
            continue
        seen.add(key)
        est = estimate(counts)
        if abs(est - target) < abs(best_estimate - target) - 1e-9:
            best, best_counts, best_estimate = x, counts, est
        if est > target + 25:
            break
    return best, best_counts, best_estimate


def magnitude_importance(p: int) -> Any:
    tp = import_torch_pruning()
    return tp.importance.GroupMagnitudeImportance(p=p)


def taylor_importance() -> Any:
    tp = import_torch_pruning()
    return tp.importance.GroupTaylorImportance()


def activation_importance(graph: Any, mean_abs_output: dict[nn.Module, torch.Tensor]) -> Callable[[Any], Any]:
    """Importance of a group's channels: the mean |activation| of each output channel of its layers
    (averaged over the group's layers, then normalized by the group mean like torch-pruning's own)."""
    tp = import_torch_pruning()

    class ActivationImportance(tp.importance.GroupMagnitudeImportance):
        def __call__(self, group: Any) -> torch.Tensor | None:
            values, root_idxs = [], []
            for i, (dep, idxs) in enumerate(group):
                stats = mean_abs_output.get(dep.target.module)
                if stats is None or not graph.is_out_channel_pruning_fn(dep.handler):
                    continue
                values.append(stats[idxs])
                root_idxs.append(group[i].root_idxs)
            if not values:
                return None
            return self._normalize(self._reduce(values, root_idxs), self.normalizer)

    return ActivationImportance()

