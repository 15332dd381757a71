"""Rule ``channels``: layer widths that are not a multiple of 8.

Vector kernels (XNNPACK, ARM NEON, x86 AVX) process channels in blocks of 8 floats (16 for
int8): a 33-channel conv runs as 40 with the last block partly empty, so it costs close to the
wider layer and buys nothing.  Each layer that sets a width (convs and linears; not depthwise
convs, which inherit theirs, nor the last layer, whose width the task sets) is checked; the fix
names the multiples of 8 around it and what each would add or save in MACs, counting the layers
that read the output (their input width changes too).
"""

from __future__ import annotations

from torch import nn

from mobilize.lint.graph import CONVS, WIDTH_PRESERVING, ModelView
from mobilize.lint.report import Finding, Rule, Severity


def make_divisible(value: float, divisor: int = 8) -> int:
    """MobileNet's rounding: nearest multiple of ``divisor``, never below it nor 10% under ``value``."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * value else new


def width(m: nn.Module) -> int | None:
    if isinstance(m, CONVS):
        return m.out_channels
    if isinstance(m, nn.Linear):
        return m.out_features
    return None


def is_depthwise(m: nn.Module) -> bool:
    return isinstance(m, CONVS) and m.groups > 1 and m.groups == m.in_channels == m.out_channels


def check(view: ModelView) -> list[Finding]:
    divisor = view.config.channel_divisor
    layers = [(p, m) for p, m in view.modules.items() if width(m) is not None and view.calls(p)]
    if not layers:
        return []
    order = _order(view)
    last = max(layers, key=lambda pm: order.get(pm[0], -1))[0]
    findings = []
    for path, m in layers:
        c = width(m)
        if c % divisor == 0 or path == last or is_depthwise(m):
            continue
        readers = _readers(view, path)
        scaled = view.stats[path].macs + sum(view.stats[r].macs for r in readers)
        down, up = max(divisor, c // divisor * divisor), (c // divisor + 1) * divisor
        numbers = {"channels": c, "divisor": divisor, "make_divisible": make_divisible(c, divisor),
                   "channels_down": down, "channels_up": up,
                   "macs": view.stats[path].macs, "macs_affected": scaled,
                   "macs_change_down": round(scaled * (down / c - 1)), "macs_change_up": round(scaled * (up / c - 1)),
                   "readers": readers}
        what = "output channels" if isinstance(m, CONVS) else "output features"
        options = [f"{down} ({_signed(numbers['macs_change_down'])} MACs)"] if down != c else []
        options.append(f"{up} ({_signed(numbers['macs_change_up'])} MACs)")
        counted = f"this layer and the {len(readers)} that read it" if readers else "this layer"
        findings.append(Finding(
            Rule.CHANNELS, Severity.WARN, path,
            f"{type(m).__name__} sets {c} {what}, not a multiple of {divisor}: vector kernels run it in blocks of "
            f"{divisor}, the last one partly empty",
            f"use {' or '.join(options)}, counting {counted}; make_divisible({c}) = {numbers['make_divisible']}",
            numbers))
    return findings


def _order(view: ModelView) -> dict[str, int]:
    """Execution order of the modules in the graph (definition order when there is no graph)."""
    if view.gm is None:
        return {p: i for i, p in enumerate(view.modules)}
    return {str(n.target): i for i, n in enumerate(view.nodes) if n.op == "call_module"}


def _readers(view: ModelView, path: str) -> list[str]:
    """Layers whose input width follows this layer's output: the next convs/linears in the dataflow, through
    BN, activations, pooling and depthwise convs (which pass the width on)."""
    if view.gm is None:
        return []
    start = [n for n in view.nodes if n.op == "call_module" and n.target == path]
    found: list[str] = []
    seen = set()
    queue = [u for n in start for u in n.users]
    while queue:
        node = queue.pop()
        if node in seen:
            continue
        seen.add(node)
        m = view.module_of(node)
        if m is not None and width(m) is not None:
            found.append(str(node.target))
            if is_depthwise(m):
                queue.extend(node.users)
            continue
        name = view.op_name(node)
        if (m is not None and not list(m.children())) or name.lower() in WIDTH_PRESERVING or \
                (m is not None and isinstance(m, (nn.BatchNorm2d, nn.BatchNorm1d))):
            queue.extend(node.users)
    return sorted(set(found))


def _signed(n: int) -> str:
    sign = "+" if n > 0 else "-" if n < 0 else "±"
    n = abs(n)
    text = f"{n / 1e9:.2f}G" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)
    return sign + text
