"""Per-layer drift of an ExecuTorch PT2E int8 model (XNNPACKQuantizer) against its float twin, on real samples.

The int8 ``.pte`` is lowered from PT2E's converted reference graph, which XNNPACK's int8
kernels reproduce (the exporter checks the two agree), so the analysis runs on that graph with
torchao's PT2E numeric debugger: both graphs come from one ``torch.export`` capture, so
``prepare_for_propagation_comparison`` tags their nodes with the same source, and
``extract_results_from_loggers`` / ``compare_results`` pair every float node with its quantized
twin.  The float graph is the same capture through ``prepare_pt2e``/``convert_pt2e`` with an empty
XNNPACKQuantizer (conv-BatchNorm folded the same way, nothing quantized), so node names match.

Each quantized activation (one ``quantize_per_tensor`` group: a layer's output and the ops that
share its range, such as relu, pooling and flatten) gives one :class:`LayerError`:

- ``qdq_sqnr_db``: its own rounding noise in the int8 graph (before vs after its quantize/dequantize
  pair).  A huge outlier hides here: it dominates the norm, so this looks fine while every other
  value in the tensor is rounded to zero.
- ``drift_sqnr_db``: the int8 graph's value against the float graph's (all error so far).
- ``alone_sqnr_db``: the final outputs of the *float* graph with only this tensor quantized (its
  int8 scale and zero point).  This is what ranks: what this one layer costs, whatever came before.
- ``alone_float_sqnr_db``: the final outputs of the *int8* graph with only this tensor kept float:
  what keeping it float buys back.

A layer is named by its module (``model.named_modules()``), so ``exclude`` on the executorch step
can keep it float: :attr:`LayerError.nodes` lists the producer and the modules that read the
tensor (XNNPACKQuantizer quantizes a tensor from either side, so both must stay float).  Ops
outside any submodule (a functional ``adaptive_avg_pool2d`` in the top-level ``forward``) cannot be
named that way; they are listed in ``unnamed``.

Not used, and why: ExecuTorch's ``Inspector.calculate_numeric_gap`` compares the runtime with the
graph it was lowered from (here the already-quantized one), not float with int8, and needs an
ETDump with a debug buffer.  Its ``intermediate_output_tap`` turns each tapped tensor into a
program output; it has to be inserted before PT2E (tapping after it "breaks XNNPACK's fused
multi-conv kernel", its own tests say), so the quantizer then observes the taps too and the
tapped ``.pte`` is not the one being diagnosed.

The debugger's own numbers (drift, qdq) blame conv2 below; the ablations find conv1, whose
constant outlier channel (2000, read by nothing) sets a range that rounds its other channels away:
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from typing import Any, Sequence

from mobilize.accuracy.drift import LayerDrift

ABLATE = 64
"""Quantized tensors whose two ablations are measured (the most suspicious by local or accumulated error)."""


@dataclasses.dataclass(frozen=True)
class LayerError(LayerDrift):
    """One quantized activation of the PT2E int8 graph (``tensor``: the graph node, ``x`` for the model input;
    ``producer``: the module that computes it, ``""`` at the top level; ``op_type``: the op and the range-sharing
    ops after it, ``conv2d+relu``; ``consumers``: modules whose ops read it) and what its quantization costs."""

    alone_float_sqnr_db: float | None = None
    """Final-output SQNR of the int8 graph with only this tensor kept float (None when not measured)."""
    unnamed: tuple[str, ...] = ()
    """Ops that quantize this tensor but belong to no submodule, so ``exclude`` cannot keep them float."""

    @property
    def layer(self) -> str:
        """What the table calls it: the producing module, ``(input)``, or ``(tensor)`` at the top level."""
        return self.producer if self.producer else ("(input)" if self.producer is None else f"({self.tensor})")

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, **super().to_json(), "keep_float": list(self.nodes)}


def localise(module: Any, example: Sequence[Any], calibration: Sequence[Sequence[Any]],
             samples: Sequence[Sequence[Any]], per_channel: bool = True, exclude: Sequence[str] = (),
             ablate: int | None = ABLATE) -> list[LayerError]:
    """Every quantized activation of the static int8 model (as the executorch exporter quantizes ``module``:
    XNNPACKQuantizer, ``calibration`` inputs, ``exclude`` kept float) scored on ``samples``; worst first.

    ``ablate``: measure the two ablations for at most this many tensors (None: all)."""
    import torch
    from mobilize.backends.executorch.quant import calibrate_and_convert, unconfigured_quantizer, xnnpack_quantizer
    from mobilize.lowering.torch_export import capture

    program = capture(module, example)
    float_graph = _without_asserts(calibrate_and_convert(program.module(), unconfigured_quantizer(), []))
    int8_graph = _without_asserts(calibrate_and_convert(program.module(), xnnpack_quantizer(per_channel,
                                                                                            exclude=exclude),
                                                        calibration))
    samples = [list(s) for s in samples]
    with torch.no_grad():
        reference = [_flat(float_graph(*s)) for s in samples]
    groups = _groups(int8_graph)
    pairs = {}
    for g in groups:
        first_dq = next(u for u in g.quantize[0].users if _is_dq(u))
        last_dq = next(u for u in g.quantize[-1].users if _is_dq(u))
        pairs["qdq", g.tensor] = (("int8", g.quantize[0].args[0].name), ("int8", first_dq.name))
        pairs["drift", g.tensor] = (("float", g.members[-1].name), ("int8", last_dq.name))
    sqnr, drift_by_node = _logged(float_graph, int8_graph, samples, pairs)
    measured = []
    for g in groups:
        drift = drift_by_node.get(g.members[-1].name, sqnr["drift", g.tensor])
        measured.append((g, sqnr["qdq", g.tensor], drift))
    chosen = _ablation_order([(g.tensor, q, d) for g, q, d in measured], len(measured) if ablate is None else ablate)
    # one copy of each graph with every group's quantize/dequantize pairs behind a switch, flipped one group at a time
    quantize_one, off = _switchable(float_graph, groups, on=False)
    float_one, on = _switchable(int8_graph, groups, on=True)
    layers = []
    for g, qdq, drift in measured:
        alone = alone_float = None
        if g.tensor in chosen:
            alone = _output_sqnr_db(quantize_one, off[g.tensor], samples, reference)
            alone_float = _output_sqnr_db(float_one, on[g.tensor], samples, reference)
        layers.append(LayerError(g.tensor, g.producer, g.op_type, g.consumers, qdq, drift, alone, alone_float,
                                 g.unnamed))
    return sorted(layers, key=lambda l: (l.alone_sqnr_db is None, l.score_db, l.drift_sqnr_db))


def format_table(layers: Sequence[LayerError], top: int = 10) -> list[str]:
    """The ranked table for the terminal."""

    def db(x: float | None) -> str:
        return "-" if x is None else ("inf" if x == math.inf else f"{x:.1f}")

    rows = [f"{'rank':>4}  {'layer':<24} {'op':<16} {'alone dB':>8} {'float dB':>8} {'drift dB':>8} {'qdq dB':>7}"
            f"  keep float"]
    for k, l in enumerate(layers[:top], 1):
        name = l.layer
        keep = ", ".join(l.nodes) or "-"
        if l.unnamed:
            keep += f" (not by name: {', '.join(l.unnamed)})"
        rows.append(f"{k:>4}  {name[:24]:<24} {l.op_type[:16]:<16} {db(l.alone_sqnr_db):>8} "
                    f"{db(l.alone_float_sqnr_db):>8} {db(l.drift_sqnr_db):>8} {db(l.qdq_sqnr_db):>7}  {keep}")
    return rows


# -- the graph -----------------------------------------------------------------------------------------------

_SHARE_RANGE = {"relu", "relu_", "hardtanh", "hardtanh_", "max_pool2d", "mean", "permute", "permute_copy",
                "transpose", "squeeze", "squeeze_copy", "adaptive_avg_pool2d", "view_copy", "view", "reshape",
                "slice", "slice_copy", "flatten", "dropout", "dropout_"}
"""Ops that XNNPACKQuantizer gives their input's range (``_is_share_obs_or_fq_op``): part of the layer before."""
_SELF_ANNOTATED = {"adaptive_avg_pool2d", "add", "mul", "cat", "conv1d", "conv2d", "convolution", "linear",
                   "conv_transpose1d", "conv_transpose2d"}
"""Ops XNNPACKQuantizer quantizes on their own (not only by sharing a neighbour's range)."""


@dataclasses.dataclass
class _Group:
    """The quantize/dequantize nodes of one layer's output (its own and those of the range-sharing ops after it)."""

    anchor: Any
    members: list = dataclasses.field(default_factory=list)
    """The float nodes whose outputs are quantized, in graph order."""
    quantize: list = dataclasses.field(default_factory=list)
    dequantize: list = dataclasses.field(default_factory=list)
    consumers: tuple[str, ...] = ()
    unnamed: tuple[str, ...] = ()

    @property
    def tensor(self) -> str:
        return self.members[0].name

    @property
    def producer(self) -> str | None:
        return None if self.anchor.op == "placeholder" else _module_path(self.anchor)

    @property
    def op_type(self) -> str:
        if self.anchor.op == "placeholder":
            return "input"
        ops = [_op(self.anchor)] + [_op(m) for m in self.members if m is not self.anchor]
        return "+".join(dict.fromkeys(ops))


def _op(node: Any) -> str:
    target = getattr(node.target, "__name__", str(node.target))
    return target.split(".")[0]


def _is_q(node: Any) -> bool:
    return node.op == "call_function" and str(node.target).startswith("quantized_decomposed.quantize_per_tensor")


def _is_dq(node: Any) -> bool:
    return node.op == "call_function" and str(node.target).startswith("quantized_decomposed.dequantize_per_tensor")


def _module_path(node: Any) -> str:
    """The innermost module the node was traced in (``""`` at the top level)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path[len("L['self']."):] if path.startswith("L['self'].") else path


def _anchor(node: Any) -> Any:
    """Walk back from a quantized tensor through range-sharing ops and Q/DQ pairs to the op that computes it."""
    while node.op == "call_function" and (_is_q(node) or _is_dq(node) or _op(node) in _SHARE_RANGE) and node.args:
        node = node.args[0]
    return node


def _groups(graph_module: Any) -> list[_Group]:
    """Activation quantize nodes grouped by the layer whose output they quantize, in graph order."""
    groups: dict[Any, _Group] = {}
    for node in graph_module.graph.nodes:
        if not _is_q(node) or node.args[0].op == "get_attr":
            continue
        anchor = _anchor(node.args[0])
        g = groups.setdefault(anchor, _Group(anchor))
        g.members.append(node.args[0])
        g.quantize.append(node)
        g.dequantize += [u for u in node.users if _is_dq(u)]
    for g in groups.values():
        readers = [u for dq in g.dequantize for u in dq.users
                   if u.op == "call_function" and not _is_q(u) and u not in g.members]
        g.consumers = tuple(dict.fromkeys(_module_path(u) for u in readers if _module_path(u)))
        on_top = [n for n in [g.anchor, *g.members, *readers] if n.op == "call_function" and not _module_path(n)
                  and _op(n) in _SELF_ANNOTATED]
        g.unnamed = tuple(dict.fromkeys(n.name for n in on_top))
    return list(groups.values())


def _switchable(graph_module: Any, groups: Sequence[_Group], on: bool) -> tuple[Any, dict[str, list | None]]:
    """A copy of ``graph_module`` (the float or the int8 graph) in which every group's quantize/dequantize pairs
    are switches (``on``: quantizing), and each group's switches by tensor name (None: the group cannot be
    switched here, its tensor having no twin of the same name, or qparams computed at run time)."""
    import torch

    gm = copy.deepcopy(graph_module)
    by_name = {n.name: n for n in gm.graph.nodes}
    last_input = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
    switches: dict[str, list | None] = {}
    for gi, g in enumerate(groups):
        pairs = [(q, next(u for u in q.users if _is_dq(u))) for q in g.quantize]
        if any(isinstance(a, torch.fx.Node) for q, dq in pairs for a in (*q.args[1:], *dq.args[1:])) or \
                any(q.args[0].name not in by_name for q, _ in pairs):
            switches[g.tensor] = None
            continue
        switches[g.tensor] = []
        for k, (q, dq) in enumerate(pairs):
            switch = _switch_class()(q.target, q.args[1:], dq.target, dq.args[1:], dict(dq.kwargs), on)
            name = f"_mobilize_quantize_switch_{gi}_{k}"
            gm.add_submodule(name, switch)
            switches[g.tensor].append(switch)
            if q.name in by_name:  # the int8 graph: the switch replaces the pair
                old_q = by_name[q.name]
                with gm.graph.inserting_after(old_q):
                    node = gm.graph.call_module(name, (old_q.args[0],))
                for old_dq in [u for u in old_q.users if _is_dq(u)]:
                    old_dq.replace_all_uses_with(node)
                    gm.graph.erase_node(old_dq)
                gm.graph.erase_node(old_q)
            else:  # the float graph: the switch goes after the tensor's producer
                src = by_name[q.args[0].name]
                with gm.graph.inserting_after(last_input if src.op == "placeholder" else src):
                    node = gm.graph.call_module(name, (src,))
                src.replace_all_uses_with(node, delete_user_cb=lambda user, new=node: user is not new)
    gm.graph.lint()
    gm.recompile()
    return gm, switches


@functools.cache
def _switch_class() -> type:
    import torch

    class QuantizeSwitch(torch.nn.Module):
        """One tensor's quantize/dequantize pair (the int8 graph's own ops and qparams), on or off."""

        def __init__(self, quantize: Any, q_args: tuple, dequantize: Any, dq_args: tuple, dq_kwargs: dict,
                     on: bool) -> None:
            super().__init__()
            self.quantize, self.q_args, self.on = quantize, tuple(q_args), on
            self.dequantize, self.dq_args, self.dq_kwargs = dequantize, tuple(dq_args), dq_kwargs

        def forward(self, x: Any) -> Any:
            if not self.on:
                return x
            return self.dequantize(self.quantize(x, *self.q_args), *self.dq_args, **self.dq_kwargs)

    return QuantizeSwitch


def _without_asserts(graph_module: Any) -> Any:
    """``graph_module`` without its ``aten._assert_tensor_metadata`` nodes (a ``.to()``'s dtype check: no value), which
    torchao's numeric debugger logs and then cannot compare ("For debug_info=... _assert_tensor_metadata_default":
    every transformers encoder has them in its mask code)."""
    import torch

    for n in list(graph_module.graph.nodes):
        if n.op == "call_function" and n.target == torch.ops.aten._assert_tensor_metadata.default and not n.users:
            graph_module.graph.erase_node(n)
    graph_module.recompile()
    return graph_module


# -- the numbers ---------------------------------------------------------------------------------------------

def _logged(float_graph: Any, int8_graph: Any, samples: Sequence[Sequence[Any]],
            pairs: dict[Any, tuple[tuple[str, str], tuple[str, str]]]) -> tuple[dict[Any, float], dict[str, float]]:
    """torchao's numeric debugger over both graphs, one sample at a time (so that a large model's activations are
    never all held): the pooled SQNR of every int8 node against the float node of the same source
    (``compare_results``), by float node name; and of each of ``pairs`` (``(graph, node name)`` twice, graph
    ``"float"`` or ``"int8"``)."""
    import torch
    from torchao.quantization.pt2e import (compare_results, extract_results_from_loggers,
                                           prepare_for_propagation_comparison)
    from torchao.quantization.pt2e._numeric_debugger import OutputLogger

    logged = {"float": prepare_for_propagation_comparison(float_graph),
              "int8": prepare_for_propagation_comparison(int8_graph)}
    loggers = {k: [m for m in gm.children() if isinstance(m, OutputLogger)] for k, gm in logged.items()}
    inputs = {k: [n.name for n in gm.graph.nodes if n.op == "placeholder"] for k, gm in logged.items()}
    drift: dict[str, _Pooled] = {}
    pooled = {key: _Pooled() for key in pairs}
    for s in samples:
        values: dict[str, dict[str, Any]] = {}
        with torch.no_grad():
            for k, gm in logged.items():
                gm(*s)
                values[k] = {m.node_name: m.stats[-1] for m in loggers[k] if m.stats}
                values[k].update(zip(inputs[k], s))  # the loggers skip placeholders: their values are the inputs
        for summary in compare_results(extract_results_from_loggers(logged["float"]),
                                       extract_results_from_loggers(logged["int8"])).values():
            for r in summary.results:
                drift.setdefault(summary.ref_node_name, _Pooled()).add(r.ref, r.actual)
        for key, ((ga, a), (gb, b)) in pairs.items():
            if a in values[ga] and b in values[gb]:
                pooled[key].add(values[ga][a], values[gb][b])
        for k in logged:
            for m in loggers[k]:
                m.stats.clear()
    return ({key: p.db for key, p in pooled.items()},
            {name: p.db for name, p in drift.items() if not math.isnan(p.db)})


class _Pooled:
    """Signal and noise energy summed over samples: 10 log10(|want|^2 / |got - want|^2)."""

    def __init__(self) -> None:
        self.signal = self.noise = 0.0
        self.pairs = 0

    def add(self, want: Any, got: Any) -> None:
        for w, g in zip(_flat(want), _flat(got)):
            if w.shape != g.shape or not w.is_floating_point() or not g.is_floating_point():
                continue
            w64, g64 = w.double(), g.double()
            self.signal += float((w64 ** 2).sum())
            self.noise += float(((g64 - w64) ** 2).sum())
            self.pairs += 1

    @property
    def db(self) -> float:
        if not self.pairs:
            return math.nan
        from mobilize.accuracy.metrics import sqnr_from_powers

        return sqnr_from_powers(self.signal, self.noise)


def _flat(out: Any) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _flat(o)]
    return []


def _output_sqnr_db(graph_module: Any, switches: list | None, samples: Sequence[Sequence[Any]],
                    reference: Sequence[list]) -> float | None:
    """Final-output SQNR with ``switches`` flipped (None when the group has none)."""
    import torch

    if switches is None:
        return None
    for switch in switches:
        switch.on = not switch.on
    try:
        pooled = _Pooled()
        with torch.no_grad():
            for s, want in zip(samples, reference):
                pooled.add(want, graph_module(*s))
        return pooled.db
    finally:
        for switch in switches:
            switch.on = not switch.on


def _ablation_order(scores: Sequence[tuple[str, float, float]], limit: int) -> set[str]:
    """Which tensors to ablate when not all: the lowest local and accumulated SQNR, alternately."""
    def key(x: float) -> float:
        return math.inf if math.isnan(x) else x

    by_qdq = [t for t, _, _ in sorted(scores, key=lambda s: key(s[1]))]
    by_drift = [t for t, _, _ in sorted(scores, key=lambda s: key(s[2]))]
    out: list[str] = []
    for pair in zip(by_qdq, by_drift):
        for t in pair:
            if t not in out and len(out) < limit:
                out.append(t)
    return set(out)

