"""ExecuTorch ``.pte``: torch.export → XNNPACK lowering → .pte, float or PT2E int8, with a delegation report.

The fast path is the default (MobileNetV2 here: 8 ms delegated vs 2.6 s on portable kernels),
and every export says how much of the model XNNPACK took — a fallback is a WARNING in the
artifact's notes and in ``<artifact>.delegation.json``.  ``bundle: true`` also writes a
``.bpte`` (inputs, expected outputs, tolerances) next to the ``.pte`` and verifies it here.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from pathlib import Path
from typing import Any

from mobilize.core.artifact import Artifact, atomic_write_bytes
from mobilize.core.registry import did_you_mean
from mobilize.core.errors import ConfigError, ExportError, translate_errors, typed_headline
from mobilize.backends.executorch.bundled import BundleCheck, verify_bundled_program
from mobilize.backends.executorch.bpte import bundled_inputs
from mobilize.backends.executorch.delegation import DelegationReport, delegation_report
from mobilize.accuracy.verify import Kind
from mobilize.exporters.base import Expectation, Exporter
from mobilize.core.context import Context
from mobilize.core.inputs import MemoryFormat

__all__ = ["Delegate", "Quantize", "ExecuTorchConfig", "ExecuTorchExporter", "DelegationReport",
           "delegation_report", "verify_bundled_program", "bundled_inputs", "BundleCheck"]


class Delegate(enum.StrEnum):
    XNNPACK = "xnnpack"
    NONE = "none"


class Quantize(enum.StrEnum):
    NONE = "none"
    INT8 = "int8"
    INT8_DYNAMIC = "int8_dynamic"
    QAT = "qat"


@dataclasses.dataclass(frozen=True)
class ExecuTorchConfig:
    delegate: Delegate = Delegate.XNNPACK
    """xnnpack: lower to the XNNPACK delegate (the fast path); none: portable kernels only (for comparison)."""
    quantize: Quantize = Quantize.NONE
    """none (float32); int8: static PT2E, calibrated on real samples; int8_dynamic: int8 weights, activations
    quantized at run time (Linear-heavy models); qat: fine-tune with fake quantization on labelled data, then int8."""
    per_channel: bool = True
    """Per-channel int8 weights (else per-tensor)."""
    exclude: tuple[str, ...] = ()
    """Qualified names of submodules (as ``model.named_modules()`` gives them, e.g. ``features.3.conv``) that
    the XNNPACKQuantizer leaves in float: their ops run as fp32 and the tensors they read and write stay float
    unless a quantized neighbour quantizes them (``mobilize tune`` names the producer and its readers)."""
    fp16: bool = False
    """XNNPACK fp16: weights and activations in float16, inputs and outputs still float32 (cast at the edges);
    float only, not with quantize."""
    calibration_samples: int = 32
    """Samples from ``--data`` that calibrate static int8 (seeded random inputs without data, noted)."""
    qat_epochs: int = 3
    qat_lr: float = 1e-3
    """SGD (momentum 0.9) learning rate for QAT fine-tuning."""
    qat_batch_size: int = 32
    qat_samples: int = 1024
    """Most labelled samples QAT trains on."""
    bundle: bool = False
    """Also write a bundled program (.bpte): the program plus sample inputs, expected outputs and tolerances."""
    bundle_samples: int = 2
    bundle_atol: float | None = None
    """Absolute tolerance of the bundled outputs (None: 1e-4 for float, 2 output int8 steps for int8)."""
    bundle_rtol: float | None = None
    """Relative tolerance of the bundled outputs (None: 1e-4 for float, 0 for int8)."""
    min_delegated_percent: float = 0.0
    """Fail the export when fewer ops than this run in the delegate (0: never fail; below 50% always warns)."""


def _Float16(module: Any) -> Any:
    """The model in float16 between float32 inputs and outputs (XNNPACK runs the float16 part)."""
    import torch

    class Float16(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = copy.deepcopy(module).half().eval()

        def forward(self, *inputs: Any) -> Any:
            out = self.module(*(x.half() if x.is_floating_point() else x for x in inputs))
            return torch.utils._pytree.tree_map(
                lambda t: t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t, out)

    return Float16().eval()


@dataclasses.dataclass
class _Written:
    manager: Any
    reference: Any
    samples: list
    report: DelegationReport


class ExecuTorchExporter(Exporter):
    name = "executorch"
    format = "executorch"
    suffix = ".pte"
    packages = ("torch", "executorch", "torchao")
    source_formats = ("exported_program",)
    Config = ExecuTorchConfig

    def __init__(self, config: Any = None):
        super().__init__(config)
        self.details: dict[str, Any] = {}
        """Structured facts for reports: ``delegation`` (DelegationReport.to_json()), ``bundle``."""
        self._written: _Written | None = None
        self._fp16_error = 0.0

    def requires(self, ctx: Context) -> None:
        if ctx.quant.quantized:
            raise ConfigError("the model is already eager-quantized; ExecuTorch quantizes with PT2E itself",
                              hint="drop the eager quantize step and set quantize: int8 on the executorch step "
                                   "(or use the executorch-int8 recipe)")
        super().requires(ctx)
        quant = self.config.quantize
        if self.config.fp16 and quant != Quantize.NONE:
            raise ConfigError(f"fp16 and quantize: {quant} exclude each other", hint="keep one of them")
        if self.config.exclude and quant == Quantize.NONE:
            raise ConfigError("exclude keeps submodules out of int8, but quantize is none",
                              hint="set quantize: int8 (or int8_dynamic, qat), or drop exclude")
        if quant == Quantize.QAT and len(ctx.input_specs) != 1:
            raise ConfigError(f"quantize: qat fine-tunes models with one input; this one has {len(ctx.input_specs)}",
                              hint="use quantize: int8 (static, calibrated on --data) or int8_dynamic")
        if quant == Quantize.QAT and (ctx.data is None or not ctx.data.labelled):
            what = "no data source was given" if ctx.data is None else f"'{ctx.data.reference}' has no labels"
            raise ConfigError(f"quantize: qat fine-tunes on labelled data, but {what}",
                              hint="give --data with labels: digits, a folder with one subfolder per class, "
                                   "or an .npz with y")

    def expectation(self, ctx: Context | None) -> Expectation:
        kind = Kind.FLOAT if self.config.quantize == Quantize.NONE else Kind.QUANTIZED
        kind = Kind.REDUCED if self.config.fp16 else kind
        return Expectation(kind)

    # -- the .pte -------------------------------------------------------------------------
    def write(self, module: Any, ctx: Context, path: Path) -> None:
        from mobilize.lowering.torch_export import capture
        from mobilize.backends.executorch.stages import lower, serialize
        from mobilize.backends.executorch.runtime import portable_lib

        cfg = self.config
        self._fp16_error = 0.0
        module = self._as_module(module)
        example = ctx.example_inputs()
        samples = self._samples(ctx)
        if cfg.fp16:
            float_module, module = module, _Float16(module)
            self.note("fp16: weights and activations in float16 (XNNPACK fp16 kernels), float32 inputs and outputs "
                      "cast at the edges")
            self._note_error(float_module, module, ctx, samples)
        with translate_errors(ExportError, f"PT2E {cfg.quantize} quantization", stage="quantize",
                              message=lambda exc: f"PT2E {cfg.quantize} quantization failed: {typed_headline(exc)}"):
            reference = self._quantize(module, ctx, example, samples)
        self._partition_notes: list[str] = []
        edge = lower(capture(reference, example), self._partitioners())
        for text in self._partition_notes:
            self.note(text)
        report = delegation_report(edge)
        self.note(report.summary())
        self.details = {"delegation": report.to_json()}
        pct = report.delegated_percent or 0.0
        if cfg.min_delegated_percent and pct < cfg.min_delegated_percent:
            raise ExportError(f"only {pct:.0f}% of ops run in the delegate (min_delegated_percent: "
                              f"{cfg.min_delegated_percent:g}): {report.summary()}", stage="lower")
        manager = serialize(edge, set(portable_lib()._get_operator_names()))
        self._note_memory_format(ctx, manager.buffer)
        atomic_write_bytes(path, manager.buffer)
        self._written = _Written(manager, reference, samples, report)
        if reference is not module:
            self._note_error(module, reference, ctx, samples)

    def _partitioners(self) -> list:
        if self.config.delegate == Delegate.NONE:
            self.note("delegate: none: every op runs on ExecuTorch's portable kernels (for comparison only)")
            return []
        from mobilize.backends.executorch.partition import xnnpack_partitioner

        return [xnnpack_partitioner(self._partition_notes)]

    def _as_module(self, module: Any) -> Any:
        import torch

        if isinstance(module, torch.export.ExportedProgram):
            return module.module()
        if isinstance(module, Artifact):
            if module.format != "exported_program":
                raise ConfigError(f"the executorch exporter takes a PyTorch model or a .pt2 program, not a "
                                  f"{module.format} file ({module.path.name})")
            return torch.export.load(str(module.path)).module()
        if not isinstance(module, torch.nn.Module):
            raise ConfigError(f"the executorch exporter takes a torch.nn.Module, not {type(module).__name__}")
        if module.training:
            self.note("the model was in training mode; exported a copy in eval mode")
            module = copy.deepcopy(module).eval()
        return module

    def _samples(self, ctx: Context) -> list:
        """Real inputs for calibration, the bundle and the int8 tolerance; only fetched when needed."""
        cfg = self.config
        wanted = max(cfg.calibration_samples if cfg.quantize == Quantize.INT8 else 0,
                     cfg.bundle_samples if cfg.bundle else 0,
                     8 if cfg.quantize != Quantize.NONE or cfg.fp16 else 0)
        return ctx.calibration_batches(wanted) if wanted else []

    def _quantize(self, module: Any, ctx: Context, example: list, samples: list) -> Any:
        from mobilize.backends.executorch import quant as q

        cfg = self.config
        source = ctx.calibration_source
        if cfg.quantize == Quantize.NONE:
            return module
        exclude = self._check_exclude(module)
        if cfg.quantize == Quantize.INT8:
            calibration = samples[:cfg.calibration_samples]
            self.note(f"int8: static PT2E ({'per-channel' if cfg.per_channel else 'per-tensor'} weights, XNNPACKQuantizer), "
                      f"calibrated on {len(calibration)} samples from {source}")
            converted = q.quantize_static(module, example, calibration, cfg.per_channel, exclude)
        elif cfg.quantize == Quantize.INT8_DYNAMIC:
            self.note("int8_dynamic: int8 weights, activations quantized at run time (XNNPACKQuantizer dynamic)")
            converted = q.quantize_dynamic(module, example, cfg.per_channel, exclude)
        else:
            options = q.QatOptions(cfg.qat_epochs, cfg.qat_lr, cfg.qat_batch_size, cfg.qat_samples)
            converted, note = q.quantize_qat(module, ctx.input_specs[0], ctx.data, options, cfg.per_channel, exclude)
            self.note(note)
        if exclude:
            self.note(f"kept {len(exclude)} submodule(s) in float (exclude): {', '.join(exclude)}")
        return converted

    def _check_exclude(self, module: Any) -> tuple[str, ...]:
        """The ``exclude`` names, each checked against the model's submodules (one error naming the close ones)."""

        import torch

        names = [n for n, _ in module.named_modules() if n]
        if isinstance(getattr(module, "graph", None), torch.fx.Graph):  # a .pt2 program: its submodules are flattened
            names += [path for node in module.graph.nodes
                      for path, _ in (node.meta.get("nn_module_stack") or {}).values() if path]
        for name in self.config.exclude:
            if name not in names:
                raise ConfigError(f"exclude: the model has no submodule named '{name}'",
                                  hint=did_you_mean(name, names, None, otherwise="names are as model.named_modules() "
                                                                                 "gives them, e.g. features.3.conv"))
        return tuple(self.config.exclude)

    def _note_error(self, module: Any, reference: Any, ctx: Context, samples: list) -> None:
        """What quantization (or fp16) costs before any runtime: the PyTorch reference's own error against the
        float model (the fp16 bundle's tolerance is twice it)."""
        from mobilize.lowering.pt2e import max_abs_difference, output_step

        # The inputs verify_artifact draws from: real samples when there is data, else seeded random ones.
        probes = samples[:8] if ctx.data is not None else samples[:8] + [ctx.example_inputs(seed=123)]
        err, _ = max_abs_difference(reference, module, probes)
        step = (None if self.config.fp16 else output_step(reference)) or 0.0
        self._fp16_error = err
        after = " (after QAT fine-tuning)" if self.config.quantize == Quantize.QAT else ""
        what = "fp16" if self.config.fp16 else "int8"
        self.note(f"{what} error of the PyTorch reference vs the float model{after}: max abs {err:.3g} on "
                  f"{len(probes)} inputs" + (f" ({err / step:.1f} output steps)" if step else ""))

    def _note_memory_format(self, ctx: Context, buffer: bytes) -> None:
        from mobilize.backends.executorch.pte import is_channels_last, read_program

        orders = read_program(buffer).input_dim_orders
        for i, spec in enumerate(ctx.input_specs):
            if spec.memory_format == MemoryFormat.CHANNELS_LAST:
                baked = is_channels_last(orders[i]) if i < len(orders) else False
                self.note(f"input {i} is channels_last: the .pte takes NHWC memory (dim order "
                          f"{orders[i] if i < len(orders) else '?'}{'' if baked else ', NOT channels-last'}); ExecuTorch does "
                          f"not check dim order, so an NCHW tensor gives wrong results silently (mobilize's runtime "
                          f"converts inputs to the program's dim order)")

    # -- side files: delegation report and bundled program ------------------------------------
    def export(self, module: Any, ctx: Context, stem: str | Path, recipe: dict | None = None) -> Artifact:
        from mobilize.backends.executorch.delegation import write_side_file

        art = super().export(module, ctx, stem, recipe)
        written, self._written = self._written, None
        write_side_file(written.report, art.path)
        if self.config.bundle:
            check = self._write_bundle(art, written)
            self.details["bundle"] = {"path": str(check.path), "atol": check.atol, "rtol": check.rtol,
                                      "test_cases": len(check.cases), "max_abs_error": check.max_abs_error}
            art.notes.append(f"{self.name}: {check.describe()}")
            art.write_manifest()
        return art

    def _write_bundle(self, art: Artifact, written: _Written) -> BundleCheck:
        import torch

        from mobilize.backends.executorch.bundled import build_bundled_program, write_bundle_manifest
        from mobilize.backends.executorch.bpte import BundledCase
        from mobilize.lowering.pt2e import output_step
        from mobilize.runtimes.base import flatten_outputs

        cfg = self.config
        quantized = cfg.quantize != Quantize.NONE
        cases = []
        with torch.no_grad():
            for inputs in written.samples[:cfg.bundle_samples]:
                cases.append(BundledCase(list(inputs), flatten_outputs(written.reference(*inputs))))
        if quantized:
            absmax = max(float(t.abs().max()) for c in cases for t in c.expected_outputs)
            step = output_step(written.reference) or 1e-2 * absmax
            atol = cfg.bundle_atol if cfg.bundle_atol is not None else 2 * step
            rtol = cfg.bundle_rtol if cfg.bundle_rtol is not None else 0.0
        else:
            # fp16: the expected outputs come from PyTorch's own float16 run, which carries its own fp16 error
            atol = cfg.bundle_atol if cfg.bundle_atol is not None else (max(1e-4, 2 * self._fp16_error) if cfg.fp16 else 1e-4)
            rtol = cfg.bundle_rtol if cfg.bundle_rtol is not None else 1e-4
        path = art.path.with_suffix(".bpte")
        atomic_write_bytes(path, build_bundled_program(written.manager, cases))
        fields = {k: v for k, v in art.to_json().items() if k in ("format", "input_specs", "recipe")}
        fields["notes"] = list(art.notes)
        write_bundle_manifest(path, fields, atol, rtol,
                              "the PT2E int8 reference model" if quantized else "the eager float model")
        return verify_bundled_program(path)
