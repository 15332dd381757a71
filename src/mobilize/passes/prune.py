"""``prune``: structured channel pruning that makes the layers smaller, or unstructured weight sparsity
stated honestly; BatchNorm re-estimation and an optional fine-tune (with distillation) win accuracy back.

* ``structured``: removes whole output channels by importance (l1 / l2 norm, or ``data``: Taylor on
  labelled ``--data``, mean activation on unlabelled) and rewrites every dependent layer with
  torch-pruning's dependency graph (conv -> BN -> conv, depthwise groups, residual adds, concatenations,
  the final Linear's inputs).  Channel counts stay multiples of ``round_to``; ``ratio`` is the fraction
  of MACs (or parameters, ``measure``) removed.  Dense mobile kernels run the smaller layers faster.
* ``unstructured``: zeroes ``ratio`` of the Conv/Linear weights (one global magnitude threshold, or per
  layer); the masks are made permanent.  The model has as many weights and MACs as before, and dense
  runtimes will not run it faster: the report says so and gives the exact sparsity.

Facts for the report go to ``ctx.details["prune"]`` (``params_before``, ``macs_after``,
``sparsity_percent``, per-layer ``layers`` rows ...; see :func:`Prune.run`).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from typing import Any

from torch import nn

from mobilize.core.errors import ConfigError
from mobilize.passes import PASSES
from mobilize.passes.base import Context, Pass, PassConfig


class Method(enum.StrEnum):
    STRUCTURED = "structured"
    UNSTRUCTURED = "unstructured"


class Scope(enum.StrEnum):
    GLOBAL = "global"
    LAYER = "layer"


class Importance(enum.StrEnum):
    L1 = "l1"
    L2 = "l2"
    DATA = "data"


class Measure(enum.StrEnum):
    MACS = "macs"
    PARAMS = "params"


@dataclasses.dataclass(frozen=True)
class PruneConfig(PassConfig):
    method: Method = Method.STRUCTURED
    """structured: remove whole channels (smaller layers, faster everywhere); unstructured: zero single
    weights (same size and speed on dense runtimes)."""
    ratio: float = 0.3
    """Fraction removed, between 0 and 1: structured, of the MACs (or parameters, see ``measure``);
    unstructured, of the Conv/Linear weights (the target sparsity)."""
    measure: Measure = Measure.MACS
    """What ``ratio`` counts for structured pruning: macs (compute) or params."""
    scope: Scope = Scope.LAYER
    """layer: every layer (channel group) loses the same fraction; global: one importance threshold
    across layers (importance normalized per group for structured pruning)."""
    importance: Importance = Importance.L2
    """l1 / l2: weight norms; data: Taylor (|w * grad|) on labelled --data, activation-based on unlabelled."""
    round_to: int = 8
    """Structured: kept channel counts are multiples of this (SIMD widths of mobile kernels)."""
    ignore: tuple[str, ...] = ()
    """Module names (with their children) to leave unpruned."""
    importance_samples: int = 64
    """Samples from --data that score importance: data."""
    bn_samples: int = 256
    """Samples from --data that re-estimate BatchNorm statistics after pruning (0: keep the old ones)."""
    finetune_epochs: int = 0
    """Epochs of fine-tuning on labelled --data after pruning (0: none)."""
    finetune_lr: float = 5e-4
    """Adam learning rate of the fine-tune (5e-4: 97.4% top-1 after one distilled epoch on the default model
    pruned 30%, against 97.0% at 1e-3)."""
    finetune_batch_size: int = 32
    finetune_samples: int = 1024
    """Most labelled samples one fine-tuning epoch uses."""
    finetune_max_steps: int = 0
    """Stop fine-tuning after this many optimizer steps (0: no limit)."""
    distill: bool = False
    """Fine-tune with knowledge distillation from the unpruned model (its softened outputs)."""
    temperature: float = 4.0
    """Distillation temperature."""
    distill_weight: float = 0.5
    """Weight of the distillation loss (the rest is cross-entropy on the labels)."""

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.ratio < 1:
            problems.append(f"ratio must be between 0 and 1 (exclusive), got {self.ratio}")
        if self.round_to < 1:
            problems.append(f"round_to must be at least 1, got {self.round_to}")
        if self.finetune_epochs < 0 or self.finetune_max_steps < 0:
            problems.append("finetune_epochs and finetune_max_steps must not be negative")
        if self.finetune_batch_size < 2:
            problems.append(f"finetune_batch_size must be at least 2 (BatchNorm trains on batches), "
                            f"got {self.finetune_batch_size}")
        if self.temperature <= 0 or not 0 <= self.distill_weight <= 1:
            problems.append("temperature must be positive and distill_weight between 0 and 1")
        if problems:
            raise ConfigError(f"step 'prune': {'; '.join(problems)}")


@PASSES.register("prune")
class Prune(Pass):
    name = "prune"
    Config = PruneConfig

    def requires(self, ctx: Context) -> None:
        cfg = self.config
        if ctx.quant.quantized or "quantize" in ctx.applied:
            raise ConfigError("step 'prune' comes after 'quantize': the model is already quantized",
                              hint="put prune first in the recipe (before fuse and quantize)")
        if cfg.finetune_epochs and (ctx.data is None or not ctx.data.labelled):
            what = "no data source was given" if ctx.data is None else f"'{ctx.data.reference}' has no labels"
            raise ConfigError(f"prune: fine-tuning (finetune_epochs: {cfg.finetune_epochs}) needs labelled data, "
                              f"but {what}", hint="give --data with labels (digits:train, a folder with one "
                                                  "subfolder per class, an .npz with y), or set finetune_epochs: 0")
        if cfg.importance == Importance.DATA and ctx.data is None:
            raise ConfigError("prune: importance 'data' scores channels on real samples, but no data source "
                              "was given", hint="give --data, or use importance: l2")
        if (cfg.finetune_epochs or cfg.importance == Importance.DATA) and not self._data_fits(ctx):
            raise ConfigError(f"prune: '{ctx.data.reference}' feeds {ctx.data.inputs_per_sample} input(s) and the "
                              f"model takes {len(ctx.input_specs)}; data steps support one-input models",
                              hint="use importance: l2 and finetune_epochs: 0")

    @staticmethod
    def _data_fits(ctx: Context) -> bool:
        return ctx.data is not None and len(ctx.input_specs) == 1 and ctx.data.inputs_per_sample == 1

    def _batches(self, ctx: Context, limit: int, batch_size: int = 32) -> list:
        return list(ctx.data.batches(ctx.input_specs[0], limit=limit, batch_size=batch_size))

    def run(self, module: nn.Module, ctx: Context) -> nn.Module:
        """Prune, re-estimate BatchNorm, fine-tune; write ``ctx.details["prune"]``.  Long because each of the
        three stages records its figures in the details the report reads:

        ``method``, ``scope``, ``importance``, ``measure``, ``ratio_target_percent``;
        ``params_before`` / ``params_after`` (counts) and ``params_reduction_percent``;
        ``macs_before`` / ``macs_after`` (multiply-accumulates for one forward pass at the input spec) and
        ``macs_reduction_percent``, with ``macs_counter`` saying how they were counted;
        ``weights_before`` / ``weights_after`` / ``zero_weights`` (Conv/Linear weights, counts) and
        ``sparsity_percent`` (exactly zero_weights / weights_after * 100); ``sparsity_percent_all_params``;
        ``channels_before`` / ``channels_after`` (sum of Conv/Linear output channels); ``layers``: per layer
        ``out_channels_before/after``, ``in_channels_before/after``, ``weights_before/after``,
        ``zero_weights``, ``sparsity_percent``; ``kept_whole`` (layer -> reason); ``dense_runtimes_faster``;
        ``bn_recalibration_samples``; ``finetune`` (None, or ``epochs``, ``steps``, ``samples``,
        ``loss_first``, ``loss_last``, ``duration_s``, ``lr``, ``batch_size``, ``distill``, ``temperature``).
        """
        from mobilize.passes import _prune_count as count
        from mobilize.passes import _prune_train as train

        cfg = self.config
        inputs = ctx.example_inputs()
        module.eval()
        teacher = copy.deepcopy(module) if cfg.finetune_epochs and cfg.distill else None
        macs_before, out = count.counted_forward(module, inputs)
        shapes, params_before = count.tensor_shapes(out), count.count_params(module)
        table_before = count.layer_table(module)
        details: dict[str, Any] = {
            "method": str(cfg.method), "scope": str(cfg.scope), "importance": str(cfg.importance),
            "measure": str(cfg.measure) if cfg.method == Method.STRUCTURED else "weights",
            "ratio_target_percent": 100.0 * cfg.ratio,
        }
        if cfg.method == Method.STRUCTURED:
            layers = None
            self._structured(module, ctx, inputs, details, macs_before, params_before)
        else:
            layers = self._unstructured(module, ctx, details)

        details["bn_recalibration_samples"] = 0
        changed = cfg.method == Method.UNSTRUCTURED or details.get("groups_narrowed", 0) > 0
        if cfg.bn_samples and changed and train.has_batchnorm(module):
            if self._data_fits(ctx):
                used = train.recalibrate_bn(module, self._batches(ctx, cfg.bn_samples))
                details["bn_recalibration_samples"] = used
                ctx.note(self.name, f"re-estimated BatchNorm statistics on {used} samples from {ctx.data.reference}")
            else:
                ctx.note(self.name, "BatchNorm statistics were not re-estimated (no usable --data): a pruned model "
                                    "can lose most of its accuracy until they are; give --data")

        details["finetune"] = None
        if cfg.finetune_epochs:
            details["finetune"] = self._finetune(module, teacher, ctx)
        if layers is not None:
            from mobilize.passes._prune_unstructured import make_permanent

            make_permanent(layers)
        macs_after, out = count.counted_forward(module, inputs)
        count.check_outputs(out, shapes)
        params_after = count.count_params(module)
        rows = count.layer_report(table_before, count.layer_table(module))
        weights_after = sum(r["weights_after"] for r in rows.values())
        zeros = sum(r["zero_weights"] for r in rows.values())
        all_zeros = sum(int((p.detach() == 0).sum()) for p in module.parameters())
        details.update({
            "params_before": params_before, "params_after": params_after,
            "params_reduction_percent": count.reduction_percent(params_before, params_after),
            "macs_before": macs_before, "macs_after": macs_after,
            "macs_reduction_percent": count.reduction_percent(macs_before, macs_after),
            "macs_counter": f"{count.MACS_COUNTER} at input {', '.join(str(s) for s in ctx.input_specs)}",
            "weights_before": sum(r["weights_before"] for r in rows.values()), "weights_after": weights_after,
            "zero_weights": zeros,
            "sparsity_percent": 100.0 * zeros / weights_after if weights_after else 0.0,
            "sparsity_percent_all_params": 100.0 * all_zeros / params_after if params_after else 0.0,
            "channels_before": sum(r["out_channels_before"] for r in rows.values()),
            "channels_after": sum(r["out_channels_after"] for r in rows.values()),
            "dense_runtimes_faster": cfg.method == Method.STRUCTURED and macs_after < macs_before,
            "layers": rows,
        })
        ctx.details[self.name] = details
        if changed or details["finetune"]:
            what = (f"{cfg.method} pruning ({details['macs_reduction_percent']:.0f}% fewer MACs, "
                    f"{details['sparsity_percent']:.0f}% zero weights)")
            ctx.changed_model = what + (", fine-tuned" if details["finetune"] else "")
        self._summary(ctx, details)
        return module.eval()

    # -- the two methods ----------------------------------------------------------------------
    def _structured(self, module: nn.Module, ctx: Context, inputs: list, details: dict[str, Any],
                    macs_before: int, params_before: int) -> None:
        from mobilize.passes import _prune_structured as structured
        from mobilize.passes._prune_count import weighted_layers

        cfg = self.config
        traced = structured.trace(module, inputs)
        if cfg.importance == Importance.DATA:
            if ctx.data.labelled:
                from mobilize.passes._prune_train import accumulate_gradients

                used = accumulate_gradients(module, self._batches(ctx, cfg.importance_samples), self.name)
                importance, how = structured.taylor_importance(), f"Taylor (|w * grad|) on {used} labelled samples"
            else:
                from mobilize.passes._prune_train import activation_statistics

                batches = self._batches(ctx, cfg.importance_samples)
                mean_abs, _ = activation_statistics(module, weighted_layers(module), batches)
                importance = structured.activation_importance(traced.graph, mean_abs)
                how = f"mean |activation| on {sum(len(x) for x, _ in batches)} unlabelled samples"
            details["importance_samples"] = cfg.importance_samples
        else:
            importance = structured.magnitude_importance(1 if cfg.importance == Importance.L1 else 2)
            how = f"{cfg.importance} norm of the weights"
        options = structured.StructuredOptions(cfg.ratio, str(cfg.measure), str(cfg.scope), cfg.round_to, cfg.ignore)
        plan = structured.prune_channels(module, traced, options, importance, macs_before, params_before)
        module.zero_grad(set_to_none=True)
        details.update({"round_to": cfg.round_to, "groups_narrowed": plan.groups_pruned,
                        "search_parameter": plan.parameter,
                        "estimated_reduction_percent": plan.estimated_reduction_percent,
                        "kept_whole": plan.skipped, "importance_how": how,
                        "torch_pruning_version": structured.torch_pruning_version()})

    def _unstructured(self, module: nn.Module, ctx: Context, details: dict[str, Any]) -> dict[str, nn.Module]:
        from mobilize.passes import _prune_unstructured as unstructured
        from mobilize.passes._prune_count import weighted_layers

        cfg = self.config
        layers = {n: m for n, m in weighted_layers(module).items()
                  if not any(n == p or n.startswith(p + ".") for p in cfg.ignore)}
        details["kept_whole"] = {n: "listed in ignore" for n in weighted_layers(module) if n not in layers}
        scores = None
        if cfg.importance == Importance.DATA:
            if ctx.data.labelled:
                from mobilize.passes._prune_train import accumulate_gradients

                used = accumulate_gradients(module, self._batches(ctx, cfg.importance_samples), self.name)
                scores, how = unstructured.taylor_scores(layers), f"Taylor (|w * grad|) on {used} labelled samples"
            else:
                from mobilize.passes._prune_train import activation_statistics

                batches = self._batches(ctx, cfg.importance_samples)
                _, norms = activation_statistics(module, layers, batches)
                scores = unstructured.activation_scores(layers, norms)
                how = f"|w| x input-channel norm (Wanda) on {sum(len(x) for x, _ in batches)} unlabelled samples"
            details["importance_samples"] = cfg.importance_samples
        else:
            how = "|w| (l1 and l2 rank single weights alike)"
        unstructured.attach_masks(layers, cfg.ratio, str(cfg.scope), scores)
        module.zero_grad(set_to_none=True)
        details["importance_how"] = how
        return layers

    def _finetune(self, module: nn.Module, teacher: nn.Module | None, ctx: Context) -> dict[str, Any]:
        from mobilize.passes._prune_train import FinetuneOptions, finetune

        cfg = self.config
        batches = [(x, y) for x, y in self._batches(ctx, cfg.finetune_samples, cfg.finetune_batch_size)
                   if y is not None and len(y) > 1]
        if not batches:
            raise ConfigError(f"prune: fine-tuning needs at least 2 labelled samples; {ctx.data.reference} gave fewer")
        options = FinetuneOptions(cfg.finetune_epochs, cfg.finetune_lr, cfg.finetune_max_steps, cfg.distill,
                                  cfg.temperature, cfg.distill_weight)
        result = finetune(module, teacher, batches, options, self.name)
        how = (f", distilled from the unpruned model (T={cfg.temperature:g}, weight {cfg.distill_weight:g})"
               if teacher is not None else "")
        ctx.note(self.name, f"fine-tuned {result.epochs} epoch(s), {result.steps} steps on {result.samples} labelled "
                            f"samples from {ctx.data.reference} (loss {result.loss_first:.3f} -> "
                            f"{result.loss_last:.3f}, {result.duration_s:.0f} s){how}")
        return {**result.to_json(), "lr": cfg.finetune_lr, "batch_size": cfg.finetune_batch_size,
                "distill": teacher is not None, "temperature": cfg.temperature if teacher is not None else None}

    def _summary(self, ctx: Context, d: dict[str, Any]) -> None:
        if d["method"] == Method.STRUCTURED:
            narrowed = sum(r["out_channels_after"] < r["out_channels_before"] for r in d["layers"].values())
            ctx.note(self.name, f"structured ({d['scope']} scope, importance {d['importance_how']}): MACs "
                                f"{d['macs_before']:,} -> {d['macs_after']:,} (-{d['macs_reduction_percent']:.1f}%), "
                                f"params {d['params_before']:,} -> {d['params_after']:,} "
                                f"(-{d['params_reduction_percent']:.1f}%), target -{d['ratio_target_percent']:g}% "
                                f"of {d['measure']}; {narrowed} layers narrowed to multiples of {d['round_to']} "
                                f"channels (torch-pruning {d['torch_pruning_version']})")
        else:
            ctx.note(self.name, f"unstructured ({d['scope']} scope, importance {d['importance_how']}): "
                                f"{d['zero_weights']:,} of {d['weights_after']:,} Conv/Linear weights are zero "
                                f"({d['sparsity_percent']:.2f}% exactly); parameters ({d['params_after']:,}) and MACs "
                                f"({d['macs_after']:,}) are unchanged: dense runtimes will not run this faster "
                                f"(XNNPACK, ONNX Runtime and eager multiply the zeros too) and the file is no "
                                f"smaller, only more compressible")
        if d["method"] == Method.STRUCTURED:
            got = d["macs_reduction_percent"] if d["measure"] == Measure.MACS else d["params_reduction_percent"]
            if got < d["ratio_target_percent"] - 5:
                ctx.note(self.name, f"removed only {got:.1f}% of the {d['measure']} "
                                    f"(target {d['ratio_target_percent']:g}%): the other layers are at round_to "
                                    f"({d['round_to']}) channels, feed the outputs or are kept whole (below)")
        kept = d.get("kept_whole") or {}
        if kept:
            shown = "; ".join(f"{n} ({why})" for n, why in list(kept.items())[:4])
            more = f"; and {len(kept) - 4} more" if len(kept) > 4 else ""
            ctx.note(self.name, f"kept whole: {shown}{more}")
