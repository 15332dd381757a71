"""Unstructured (weight) pruning for ``prune``: zero the least important weights of every Conv/Linear.

Masks come from ``torch.nn.utils.prune`` (global: one threshold over all layers; layer: each layer
to the ratio), scored by |w| (l1 and l2 rank single weights the same), by |w * dL/dw| summed over
labelled batches (Taylor) or by |w| times the L2 norm of the weight's input channel (activation,
for unlabelled data: Wanda, Sun et al. 2023).  The masks stay attached while fine-tuning, so pruned
weights stay zero; :func:`make_permanent` folds them into the weights.

The result has exactly as many weights as before: dense kernels (XNNPACK, ONNX Runtime, eager)
multiply the zeros too, so it is no faster and its file no smaller (only more compressible).
"""

from __future__ import annotations

import torch
from torch import nn


def taylor_scores(layers: dict[str, nn.Module]) -> dict[nn.Module, torch.Tensor]:
    """|w * grad| from accumulated gradients (see ``_prune_train.accumulate_gradients``)."""
    return {m: (m.weight.detach() * m.weight.grad.detach()).abs() for m in layers.values() if m.weight.grad is not None}


def activation_scores(layers: dict[str, nn.Module], input_norms: dict[nn.Module, torch.Tensor]
                      ) -> dict[nn.Module, torch.Tensor]:
    """|w| times the L2 norm of the input channel each weight reads (Wanda)."""
    scores = {}
    for m in layers.values():
        norms = input_norms.get(m)
        if norms is None:
            continue
        w = m.weight.detach().abs()
        if isinstance(m, nn.Linear):
            scores[m] = w * norms.view(1, -1)
            continue
        if getattr(m, "transposed", False):
            continue  # transposed convs: magnitude only
        groups = m.groups
        out_per_group, in_per_group = w.shape[0] // groups, w.shape[1]
        per_out = norms.view(groups, in_per_group).repeat_interleave(out_per_group, dim=0)  # (out, in/groups)
        scores[m] = w * per_out.view(w.shape[0], w.shape[1], *([1] * (w.dim() - 2)))
    return scores


def attach_masks(layers: dict[str, nn.Module], ratio: float, scope: str,
                 scores: dict[nn.Module, torch.Tensor] | None) -> None:
    """Attach ``torch.nn.utils.prune`` masks zeroing ``ratio`` of the weights (by count, rounded)."""
    from torch.nn.utils import prune

    scores = scores or {}
    if scope == "global":
        params = [(m, "weight") for m in layers.values()]
        importance = {(m, "weight"): scores[m] for m in layers.values() if m in scores}
        prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=ratio,
                                  importance_scores=importance or None)
    else:
        for m in layers.values():
            prune.l1_unstructured(m, "weight", amount=ratio, importance_scores=scores.get(m))


def make_permanent(layers: dict[str, nn.Module]) -> None:
    from torch.nn.utils import prune

    for m in layers.values():
        if prune.is_pruned(m):
            prune.remove(m, "weight")

