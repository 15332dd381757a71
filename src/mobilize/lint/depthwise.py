"""Rule ``depthwise``: standard convolutions that would cost a fraction of their MACs as depthwise-separable.

A k x k conv from C_in to C_out channels costs k²·C_in·C_out MACs per output pixel; a depthwise
k x k conv followed by a 1x1 pointwise conv costs k²·C_in + C_in·C_out, a factor of
1 / (1/C_out + 1/k²) less (8-9x for 3x3 convs with many channels) — the MobileNet trade.
Stems that read the image (fewer than ``depthwise_min_in_channels`` inputs) are left alone:
separating 3 input channels saves little and costs accuracy.
"""

from __future__ import annotations

import math

from torch import nn

from mobilize.lint.graph import ModelView
from mobilize.lint.report import Finding, Rule, Severity


def check(view: ModelView) -> list[Finding]:
    cfg = view.config
    findings = []
    for path, m in view.modules.items():
        if type(m) is not nn.Conv2d or m.groups != 1 or not view.calls(path):
            continue
        taps = math.prod(m.kernel_size)
        if taps == 1 or m.in_channels < cfg.depthwise_min_in_channels:
            continue
        macs = view.stats[path].macs
        pixels = macs // (taps * m.in_channels * m.out_channels) if macs else 0
        separable = pixels * (taps * m.in_channels + m.in_channels * m.out_channels)
        factor = macs / separable if separable else taps * m.out_channels / (taps + m.out_channels)
        if factor < cfg.depthwise_min_factor:
            continue
        share = macs / view.total_macs if view.total_macs else 0.0
        numbers = {"macs": macs, "macs_separable": separable, "factor": round(factor, 2),
                   "mac_share": round(share, 4), "kernel": list(m.kernel_size),
                   "in_channels": m.in_channels, "out_channels": m.out_channels}
        k = "x".join(map(str, m.kernel_size))
        findings.append(Finding(
            Rule.DEPTHWISE, Severity.WARN, path,
            f"standard {k} Conv2d {m.in_channels}->{m.out_channels} costs {_m(macs)} MACs ({share:.0%} of the model); "
            f"depthwise-separable it would cost {_m(separable)}, {factor:.1f}x fewer",
            f"replace with Conv2d({m.in_channels}, {m.in_channels}, {k}, groups={m.in_channels}) + BN + act + "
            f"Conv2d({m.in_channels}, {m.out_channels}, 1), then retrain", numbers))
    return findings


def _m(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e5 else f"{n / 1e3:.1f}k"
