"""Counting for ``prune``: parameters, MACs, per-layer channels and exact weight sparsity.

MACs come from ``torch.utils.flop_counter.FlopCounterMode`` (PyTorch's own counter): its FLOPs of
convolutions, linear layers and matmuls, halved (one multiply-accumulate is two FLOPs), for one
forward pass on the example inputs (batch as in the input spec).  Element-wise ops, BatchNorm,
activations and pooling are not counted.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from mobilize.core.errors import UnsupportedModelError

MACS_COUNTER = "torch.utils.flop_counter (FLOPs / 2 of conv, linear and matmul ops; one forward pass)"
WEIGHTED = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d, nn.Linear)
"""Layers whose ``weight`` unstructured pruning zeroes and whose channels the report lists."""


def count_macs(module: nn.Module, inputs: Sequence[Any]) -> int:
    return counted_forward(module, inputs)[0]


def counted_forward(module: nn.Module, inputs: Sequence[Any]) -> tuple[int, Any]:
    """(MACs, outputs) of one forward pass in eval mode."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = module.training
    module.eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        out = module(*inputs)
    module.train(was_training)
    return int(counter.get_total_flops()) // 2, out


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def weighted_layers(module: nn.Module) -> dict[str, nn.Module]:
    return {name: m for name, m in module.named_modules() if isinstance(m, WEIGHTED) and name}


def _channels(m: nn.Module) -> tuple[int, int]:
    if isinstance(m, nn.Linear):
        return m.out_features, m.in_features
    return m.out_channels, m.in_channels


def layer_table(module: nn.Module) -> dict[str, dict[str, int]]:
    """Per Conv/Linear layer: output and input channels, weights and how many of them are exactly zero."""
    table = {}
    for name, m in weighted_layers(module).items():
        out_channels, in_channels = _channels(m)
        weight = m.weight.detach()
        table[name] = {"out_channels": out_channels, "in_channels": in_channels,
                       "weights": weight.numel(), "zero_weights": int((weight == 0).sum())}
    return table


def layer_report(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, Any]]:
    """Rows for ``ctx.details["prune"]["layers"]``: channels before/after, exact sparsity after."""
    rows = {}
    for name, b in before.items():
        a = after.get(name)
        if a is None:
            continue
        rows[name] = {
            "out_channels_before": b["out_channels"], "out_channels_after": a["out_channels"],
            "in_channels_before": b["in_channels"], "in_channels_after": a["in_channels"],
            "weights_before": b["weights"], "weights_after": a["weights"], "zero_weights": a["zero_weights"],
            "sparsity_percent": 100.0 * a["zero_weights"] / a["weights"] if a["weights"] else 0.0,
        }
    return rows


def reduction_percent(before: int, after: int) -> float:
    return 100.0 * (before - after) / before if before else 0.0


def tensor_shapes(out: Any) -> list[tuple[int, ...]]:
    return [tuple(o.shape) for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]


def check_outputs(out: Any, shapes_before: list[tuple[int, ...]]) -> None:
    """The pruned model's outputs have the shapes they had, and are finite."""
    shapes = tensor_shapes(out)
    if shapes != shapes_before:
        raise UnsupportedModelError(f"pruning changed the output shape from {shapes_before} to {shapes}",
                                    hint="list the layers that produce the outputs in the prune step's ignore option")
    if not torch.isfinite(_first(out)).all():
        raise UnsupportedModelError("the pruned model gives NaN or inf")


def _first(out: Any) -> Any:
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out
