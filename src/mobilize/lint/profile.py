"""The per-layer profile: MACs, parameters, activation memory and each layer's share, dominating layers first.

A row is what a mobile backend runs as one kernel: a conv or linear together with the BN and
activation that fold into it (``features.1.conv.0.0`` + its BN + its ReLU), or another module,
or the ops a module's own ``forward`` runs (a residual add).  MACs come from
``torch.utils.flop_counter`` on one forward pass, so functional convs and matmuls count too;
the rows add up to the model's total.  ``--data`` adds measured time per row
(the onnxruntime backend's ``lint_timing``) next to the MAC share.
"""

from __future__ import annotations

from torch import nn

from mobilize.lint.graph import BNS, CONVS, FUSABLE_ACTIVATIONS, FUSABLE_FUNCTIONS, ModelView
from mobilize.lint.support import LayerRow, Profile, ops_row

_NO_ROW_OPS = {"getattr", "getitem", "size", "flatten", "view", "reshape", "contiguous", "dim", "permute", "transpose",
               "squeeze", "unsqueeze", "to", "float", "type_as", "detach"}
"""Graph ops that move no data worth a row (views, shape queries)."""


def build_profile(view: ModelView) -> Profile:
    rows = _rows_from_graph(view) if view.gm is not None else _rows_from_modules(view)
    total = view.total_macs
    for row in rows:
        row.mac_share = row.macs / total if total else 0.0
    rows.sort(key=lambda r: (-r.macs, -r.activation_bytes, r.module))
    specs = [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")} for t in view.example]
    peak = max((st.output_bytes for st in view.stats.values() if st.path), default=0)
    counted = sum(r.macs for r in rows)
    notes = []
    if counted != total:
        notes.append(f"rows account for {counted:,} of {total:,} MACs (a module called more than once is counted "
                     f"per call in the total)")
    params = sum(p.numel() for p in view.module.parameters())
    return Profile(rows, total, params, specs, peak, notes=notes)


def _rows_from_graph(view: ModelView) -> list[LayerRow]:
    rows: dict[str, LayerRow] = {}
    folded: set[str] = set()
    folded_nodes: set[str] = set()
    for node in view.nodes:
        if node.op == "call_module":
            path = str(node.target)
            if path in folded or path in rows:
                continue
            m = view.modules[path]
            if list(m.children()):
                continue  # not a leaf: called as a whole (rare with FX); its stats live in its children
            after, functions = _folded_after(view, node) if isinstance(m, CONVS + (nn.Linear,)) else ([], [])
            folded.update([path, *after])
            folded_nodes.update(n.name for n in functions)
            rows[path] = _module_row(view, [path, *after], functions)
        elif node.op in ("call_function", "call_method"):
            name = view.op_name(node)
            if name in _NO_ROW_OPS or node.name in folded_nodes:
                continue
            owner = view.owner(node)
            key = ops_row(owner)
            row = rows.get(key)
            if row is None:
                row = rows[key] = LayerRow(key, "", macs=view.stats[owner].macs if owner in view.stats else 0,
                                           params=view.stats[owner].params if owner in view.stats else 0,
                                           members=[owner])
            row.kind = ", ".join(sorted(set(filter(None, row.kind.split(", "))) | {name}))
            row.activation_bytes += _node_bytes(node)
    # modules whose own forward does MACs outside the graph's call_function nodes (rare) still need a row
    covered = {m for r in rows.values() for m in r.members}
    for path, st in view.stats.items():
        if st.macs and path not in covered:
            rows[ops_row(path)] = LayerRow(ops_row(path), f"{st.type_name} forward", macs=st.macs,
                                               params=st.params, activation_bytes=st.output_bytes, members=[path])
    return list(rows.values())


def _folded_after(view: ModelView, node) -> tuple[list[str], list]:
    """The BN and fusable activation that directly follow a conv/linear node (a single-user chain): their module
    paths, and the graph nodes of a functional activation (``torch.relu``)."""
    modules: list[str] = []
    current = node
    for want in ("bn", "act"):
        if len(current.users) != 1:
            break
        nxt = next(iter(current.users))
        m = view.module_of(nxt)
        if want == "bn" and isinstance(m, BNS) and view.calls(str(nxt.target)) == 1:
            modules.append(str(nxt.target))
            current = nxt
            continue
        if isinstance(m, FUSABLE_ACTIVATIONS) and view.calls(str(nxt.target)) == 1:
            modules.append(str(nxt.target))
        elif nxt.op in ("call_function", "call_method") and view.op_name(nxt) in FUSABLE_FUNCTIONS:
            return modules, [nxt]
        break
    return modules, []


def _module_row(view: ModelView, members: list[str], functions: list) -> LayerRow:
    stats = [view.stats[m] for m in members if m in view.stats]
    head = view.modules[members[0]]
    kind = " + ".join([describe(head)] + [_short(s.type_name) for s in stats[1:]] + [view.op_name(n) for n in functions])
    out_bytes = _node_bytes(functions[-1]) if functions else stats[-1].output_bytes if stats else 0
    return LayerRow(members[0], kind, macs=sum(s.macs for s in stats), params=sum(s.params for s in stats),
                    activation_bytes=out_bytes, members=[m for m in members if m in view.stats])


def _rows_from_modules(view: ModelView) -> list[LayerRow]:
    rows = []
    for path, st in view.stats.items():
        m = view.modules[path]
        leaf = not list(m.children())
        if st.calls and (leaf or st.macs):
            rows.append(LayerRow(path if leaf else ops_row(path), describe(m) if leaf else f"{st.type_name} forward",
                                 macs=st.macs, params=st.params, activation_bytes=st.output_bytes, members=[path]))
    return rows


def _short(type_name: str) -> str:
    return "BN" if type_name.startswith("BatchNorm") else type_name


def describe(m: nn.Module) -> str:
    """``Conv2d 3x3/2 dw 96``, ``Conv2d 1x1 32->192``, ``Linear 1280->1000``, else the class name."""
    if isinstance(m, CONVS):
        k = "x".join(map(str, m.kernel_size))
        stride = max(m.stride) if isinstance(m.stride, tuple) else m.stride
        text = f"{type(m).__name__} {k}" + (f"/{stride}" if stride > 1 else "")
        if m.groups > 1 and m.groups == m.in_channels == m.out_channels:
            return f"{text} dw {m.out_channels}"
        return f"{text} {m.in_channels}->{m.out_channels}" + (f" g{m.groups}" if m.groups > 1 else "")
    if isinstance(m, nn.Linear):
        return f"Linear {m.in_features}->{m.out_features}"
    return type(m).__name__


def _node_bytes(node) -> int:
    meta = node.meta.get("tensor_meta")
    shape, dtype = getattr(meta, "shape", None), getattr(meta, "dtype", None)
    if shape is None or dtype is None:
        return 0
    n = 1
    for d in shape:
        n *= int(d)
    return n * dtype.itemsize
