"""LiteRT ``.tflite`` through litert-torch: float32, PT2E int8 (static or dynamic range), fp16 weights.

Inputs are NHWC by default (LiteRT's own layout: no transpose in front of the first conv); the
layout is written into the file's metadata and the manifest, and mobilize's ``litert`` runtime
feeds NCHW tensors to it correctly.  Static int8 gives a fully integer model (int8 inputs and
outputs with the file's own scale and zero point).  Every export says which ops XNNPACK takes
and warns when most fall back to LiteRT's builtin kernels.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
from pathlib import Path
from typing import Any

from mobilize.accuracy.verify import Kind
from mobilize.core.artifact import Artifact, atomic_write_bytes
from mobilize.core.context import Context
from mobilize.core.errors import ConfigError
from mobilize.exporters.base import Expectation, Exporter
from mobilize.core.inputs import MemoryFormat
from mobilize.core.text import a


class Quantize(enum.StrEnum):
    NONE = "none"
    INT8 = "int8"
    """Static PT2E int8 (litert-torch's PT2EQuantizer, symmetric), calibrated on real samples: int8 in and out."""
    DYNAMIC = "dynamic"
    """Dynamic range: int8 weights, activations quantized at run time; float in and out."""
    FP16 = "fp16"
    """float16 weights (half the size), dequantized once at load: the arithmetic stays float32 on CPU."""


class Layout(enum.StrEnum):
    NHWC = "nhwc"
    NCHW = "nchw"


@dataclasses.dataclass(frozen=True)
class LiteRTConfig:
    quantize: Quantize = Quantize.NONE
    """none (float32), int8 (static, calibrated), dynamic (int8 weights) or fp16 (float16 weights)."""
    per_channel: bool = True
    """int8 and dynamic: one weight scale per output channel (else per tensor)."""
    calibration_samples: int = 32
    """int8: samples from ``--data`` that calibrate activation ranges (seeded random inputs without data, noted)."""
    input_layout: Layout = Layout.NHWC
    """nhwc: 4-D inputs are channels-last in the file (LiteRT's native layout, what Android camera code
    hands over); nchw: PyTorch's layout, with a transpose in front of the first conv."""

    def __post_init__(self) -> None:
        if self.calibration_samples < 1:
            raise ConfigError(f"calibration_samples must be at least 1, got {self.calibration_samples}")


class LiteRTExporter(Exporter):
    name = "litert"
    format = "tflite"
    suffix = ".tflite"
    packages = ("torch", "litert_torch", "ai_edge_litert", "torchao")
    Config = LiteRTConfig

    def __init__(self, config: Any = None):
        super().__init__(config)
        self.details: dict[str, Any] = {}
        """Structured facts for reports: ``delegation`` (which ops XNNPACK runs), ``tflite`` (ops, tensor types,
        precision, input layouts)."""
        self._layouts: list[str] = []

    def requires(self, ctx: Context) -> None:
        if ctx.quant.quantized:
            raise ConfigError("the model is already eager-quantized; LiteRT quantizes with PT2E itself",
                              hint="drop the eager quantize step and set quantize: int8 on the litert step "
                                   "(or use the litert-int8 recipe)")

    def expectation(self, ctx: Context | None) -> Expectation:
        kind = {Quantize.NONE: Kind.FLOAT, Quantize.FP16: Kind.REDUCED}.get(self.config.quantize, Kind.QUANTIZED)
        return Expectation(kind)

    def write(self, module: Any, ctx: Context, path: Path) -> None:
        from mobilize.backends.litert import convert as lc
        from mobilize.backends.litert.tflite import LAYOUT_METADATA, with_metadata

        cfg = self.config
        module = self._as_module(module)
        example = ctx.example_inputs()
        nhwc = [i for i, t in enumerate(example) if cfg.input_layout == Layout.NHWC and t.dim() == 4]
        if cfg.input_layout == Layout.NHWC and len(nhwc) < len(example):
            self.note(f"input(s) {', '.join(str(i) for i, t in enumerate(example) if i not in nhwc)} are not 4-D: "
                      "kept in their PyTorch layout")
        self._layouts = ["nhwc" if i in nhwc else "nchw" for i in range(len(example))]
        quantizer = None
        if cfg.quantize in (Quantize.INT8, Quantize.DYNAMIC):
            dynamic = cfg.quantize == Quantize.DYNAMIC
            samples = self._samples(ctx, 8 if dynamic else max(8, cfg.calibration_samples))
            calibration = samples[:cfg.calibration_samples]
            module_q, quantizer = lc.pt2e_quantize(module, example, calibration, per_channel=cfg.per_channel,
                                                   dynamic=dynamic)
            self._note_quantization(ctx, len(calibration))
            if getattr(quantizer, "added", 0):
                self.note(f"int8: also quantized {quantizer.added} tensor add(s) the litert-torch quantizer does not "
                          "match (adds through torch.ao's FloatFunctional)")
            self._note_error(module, module_q, ctx, samples)
            module = module_q
        data, notes = lc.to_tflite(module, example, quantizer, nhwc)
        for text in notes:
            self.note(text)
        if cfg.quantize == Quantize.FP16:
            data = lc.fp16_weights(data)
            self.note("fp16: conv and fully-connected weights stored as float16 (ai-edge-quantizer float_casting); "
                      "LiteRT's CPU kernels dequantize them once at load and compute in float32")
        data = with_metadata(data, LAYOUT_METADATA, json.dumps(self._layouts).encode())
        atomic_write_bytes(path, data)
        self._describe(path, data)

    def export(self, module: Any, ctx: Context, stem: str | Path, recipe: dict | None = None) -> Artifact:
        art = super().export(module, ctx, stem, recipe)
        if "nhwc" in self._layouts:  # the manifest states the layout: NCHW shape, channels-last memory
            art.input_specs = [dataclasses.replace(s, memory_format=MemoryFormat.CHANNELS_LAST) if lay == "nhwc" else s
                               for s, lay in zip(art.input_specs, self._layouts)]
            art.write_manifest()
        return art

    # -- steps ----------------------------------------------------------------------------
    def _as_module(self, module: Any) -> Any:
        import torch

        if isinstance(module, torch.export.ExportedProgram):
            return module.module()
        if isinstance(module, Artifact):
            if module.format != "exported_program":
                raise ConfigError(f"the litert exporter takes a PyTorch model or a .pt2 program, not "
                                  f"{a(str(module.format))} file ({module.path.name})",
                                  hint="give the PyTorch model (zoo:NAME, file.py:Class) it came from")
            return torch.export.load(str(module.path)).module()
        if not isinstance(module, torch.nn.Module):
            raise ConfigError(f"the litert exporter takes a torch.nn.Module, not {type(module).__name__}")
        if module.training:
            self.note("the model was in training mode; exported a copy in eval mode")
            module = copy.deepcopy(module).eval()
        return module

    def _samples(self, ctx: Context, wanted: int) -> list:
        """Real samples (batched to the input's batch size) for calibration and the int8 tolerance."""
        return ctx.calibration_batches(wanted)

    def _note_quantization(self, ctx: Context, calibrated: int) -> None:
        cfg = self.config
        weights = "per-channel" if cfg.per_channel else "per-tensor"
        if cfg.quantize == Quantize.DYNAMIC:
            self.note(f"dynamic: int8 {weights} weights, activations quantized at run time (PT2E, litert-torch "
                      "PT2EQuantizer); float inputs and outputs")
            return
        source = ctx.calibration_source
        self.note(f"int8: static PT2E ({weights} symmetric weights, int8 activations, litert-torch PT2EQuantizer), "
                  f"calibrated on {calibrated} samples from {source}")

    def _note_error(self, module: Any, reference: Any, ctx: Context, samples: list) -> None:
        """What quantization costs before any runtime: the PT2E reference's own error against the float model."""
        from mobilize.lowering.pt2e import max_abs_difference, output_step

        probes = samples[:8] if ctx.data is not None else samples[:8] + [ctx.example_inputs(seed=123)]
        err, _ = max_abs_difference(reference, module, probes)
        step = output_step(reference)
        self.note(f"{self.config.quantize} error of the PT2E reference vs the float model: max abs {err:.3g} on "
                  f"{len(probes)} inputs" + (f" ({err / step:.1f} output steps)" if step else ""))

    def _describe(self, path: Path, data: bytes) -> None:
        """Facts read back from the written file: ops, integer tensors, and what XNNPACK takes."""
        from mobilize.backends.litert.tflite import read_tflite
        from mobilize.backends.litert.runtime import delegation_of

        facts = read_tflite(data)
        report = delegation_of(path)
        self.details = {"tflite": facts.to_json(), "delegation": report.to_json()}
        if facts.inputs and facts.inputs[0].dtype in ("INT8", "UINT8") and facts.inputs[0].quantized:
            self.note(f"inputs and outputs are {facts.inputs[0].dtype.lower()} with the file's own scale and zero "
                      "point (feed quantized pixels on the device); mobilize's runtime quantizes float inputs "
                      "outside the timed loop")
        integer = sum(n for t, n in facts.tensor_types.items() if t in ("INT8", "UINT8", "INT16"))
        self.note(f"{facts.precision}: {sum(facts.op_counts.values())} ops, {integer} integer tensors "
                  f"({facts.quantized_tensors} with quantization scales); input layout "
                  f"{', '.join(self._layouts) or 'none'}")
        if facts.integer_ops and facts.float_ops:
            islands = ", ".join(f"{op} x{n}" for op, n in sorted(facts.float_ops.items(), key=lambda kv: -kv[1]))
            self.note(f"{sum(facts.float_ops.values())} op(s) stay float32 between DEQUANTIZE and QUANTIZE ({islands}): "
                      "the PT2E quantizer left them unannotated (e.g. an add through torch.ao's FloatFunctional)")
        self.note(report.summary())
        warning = report.warning()
        if warning:
            self.note(warning)
