"""Data steps of ``prune``: BatchNorm re-estimation, fine-tuning (optionally distilled from the
unpruned model), gradients for Taylor importance and activation statistics.

Pruning changes what every later BatchNorm sees, and its stored running statistics no longer fit:
on the trained default model (98.89% top-1 on digits:test), 50% unstructured sparsity gives 10.95%
(chance) without re-estimating them and 94.06% after re-estimating on 256 samples of digits:train;
structured pruning of 30% of the MACs 95.73% after.  So ``recalibrate_bn`` runs whenever data is given.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch
from torch import nn

from mobilize.core.errors import ConfigError

_BNS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


@dataclasses.dataclass(frozen=True)
class FinetuneOptions:
    epochs: int = 1
    lr: float = 5e-4
    max_steps: int = 0
    """Stop after this many optimizer steps (0: no limit)."""
    distill: bool = False
    temperature: float = 4.0
    distill_weight: float = 0.5
    seed: int = 0


@dataclasses.dataclass
class FinetuneResult:
    epochs: int
    steps: int
    samples: int
    loss_first: float
    """Mean training loss of the first steps (a fifth of them, 1 to 10)."""
    loss_last: float
    """Mean training loss of the last steps (as many)."""
    duration_s: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def first_output(out: Any) -> torch.Tensor:
    while isinstance(out, (tuple, list)):
        out = out[0]
    if isinstance(out, dict):
        out = next(iter(out.values()))
    return out


def has_batchnorm(module: nn.Module) -> bool:
    return any(isinstance(m, _BNS) for m in module.modules())


def recalibrate_bn(module: nn.Module, batches: list) -> int:
    """Re-estimate every BatchNorm's running mean/variance from ``batches`` (a cumulative average; only
    the BatchNorm layers in training mode, so dropout stays off).  Returns the number of samples used."""
    bns = [m for m in module.modules() if isinstance(m, _BNS) and m.track_running_stats]
    if not bns:
        return 0
    was_training = module.training
    momenta = [m.momentum for m in bns]
    module.eval()
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
        m.train()
    samples = 0
    with torch.no_grad():
        for x, _ in batches:
            if len(x) < 2:
                continue  # a batch of one has no variance for BatchNorm1d; its mean is too noisy anyway
            module(x)
            samples += len(x)
    for m, momentum in zip(bns, momenta):
        m.momentum = momentum
    module.train(was_training)
    return samples


def check_labels(logits: torch.Tensor, y: torch.Tensor, step: str) -> None:
    if logits.dim() != 2 or logits.shape[1] <= int(y.max()):
        raise ConfigError(f"{step}: training needs a classifier, but the model's output is {tuple(logits.shape)} "
                          f"for labels up to {int(y.max())}", hint="use a data source whose labels fit the model")


def finetune(module: nn.Module, teacher: nn.Module | None, batches: list, options: FinetuneOptions,
             step: str = "prune") -> FinetuneResult:
    """Adam on cross-entropy (plus, with a teacher, the KL divergence to its softened outputs, weighted
    ``distill_weight`` and scaled by T^2 as in Hinton et al.).  The module ends in eval mode.

    Every random draw (the batch order, dropout) comes from ``options.seed``, inside a forked RNG: the same recipe
    rebuilds the same file, and the caller's random state is left as it was.  Measured on the default model pruned
    by 50% (8 epochs at tune's settings): a script seeded with 0 gave 98.70% top-1 on digits:test, tune (unseeded
    then) 97.59%."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        return _finetune(module, teacher, batches, options, step)


def _finetune(module: nn.Module, teacher: nn.Module | None, batches: list, options: FinetuneOptions,
              step: str) -> FinetuneResult:
    import torch.nn.functional as F

    start = time.perf_counter()
    optimizer = torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=options.lr)
    order = torch.Generator().manual_seed(options.seed)
    temperature, weight = options.temperature, options.distill_weight
    if teacher is not None:
        teacher.eval()
    losses: list[float] = []
    samples = epochs = 0
    for _ in range(options.epochs):
        module.train()
        epochs += 1
        for i in torch.randperm(len(batches), generator=order).tolist():
            x, y = batches[i]
            logits = first_output(module(x))
            check_labels(logits, y, step)
            loss = F.cross_entropy(logits, y)
            if teacher is not None:
                with torch.no_grad():
                    soft = F.softmax(first_output(teacher(x)) / temperature, dim=1)
                kd = F.kl_div(F.log_softmax(logits / temperature, dim=1), soft, reduction="batchmean")
                loss = (1 - weight) * loss + weight * temperature ** 2 * kd
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            samples += len(y)
            if options.max_steps and len(losses) >= options.max_steps:
                break
        if options.max_steps and len(losses) >= options.max_steps:
            break
    k = max(1, min(10, len(losses) // 5))
    module.eval()
    return FinetuneResult(epochs, len(losses), samples, sum(losses[:k]) / k, sum(losses[-k:]) / k,
                          time.perf_counter() - start)


def accumulate_gradients(module: nn.Module, batches: list, step: str = "prune") -> int:
    """Sum the cross-entropy gradients of ``batches`` into ``.grad`` (eval mode, so BatchNorm uses its
    stored statistics) for Taylor importance.  Returns the number of samples."""
    import torch.nn.functional as F

    module.eval()
    module.zero_grad()
    samples = 0
    for x, y in batches:
        logits = first_output(module(x))
        check_labels(logits, y, step)
        F.cross_entropy(logits, y, reduction="sum").backward()
        samples += len(y)
    return samples


def activation_statistics(module: nn.Module, layers: dict[str, nn.Module], batches: list
                          ) -> tuple[dict[nn.Module, torch.Tensor], dict[nn.Module, torch.Tensor]]:
    """For each layer: mean |output| per output channel, and the L2 norm of its input per input channel
    (over samples and positions), from forward passes over ``batches``."""
    out_abs: dict[nn.Module, torch.Tensor] = {}
    in_sq: dict[nn.Module, torch.Tensor] = {}
    counts: dict[nn.Module, int] = {}

    def hook(m: nn.Module, args: tuple, out: Any) -> None:
        x, y = args[0], first_output(out)
        channel_dim = -1 if isinstance(m, nn.Linear) else 1
        y_abs = y.detach().abs().transpose(channel_dim, -1).reshape(-1, y.shape[channel_dim])
        x_sq = x.detach().pow(2).transpose(channel_dim, -1).reshape(-1, x.shape[channel_dim])
        out_abs[m] = out_abs.get(m, 0) + y_abs.sum(0)
        in_sq[m] = in_sq.get(m, 0) + x_sq.sum(0)
        counts[m] = counts.get(m, 0) + y_abs.shape[0]

    handles = [m.register_forward_hook(hook) for m in layers.values()]
    module.eval()
    try:
        with torch.no_grad():
            for x, _ in batches:
                module(x)
    finally:
        for h in handles:
            h.remove()
    return ({m: v / counts[m] for m, v in out_abs.items()}, {m: v.sqrt() for m, v in in_sq.items()})
