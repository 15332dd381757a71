"""OpenVINO IR (``.xml`` + ``.bin``): ``openvino.convert_model``, float32 / fp16 weights, NNCF int8, and the
inference precision the file is meant to run in.

OpenVINO's CPU plugin runs "float" models in bfloat16 on CPUs with AMX or AVX512-BF16 unless told
otherwise, so every IR carries its inference precision (``rt_info/runtime_options/
INFERENCE_PRECISION_HINT``: ``f32`` unless a recipe asks for ``bf16`` or ``f16``) and mobilize's
``openvino`` runtime sets it explicitly: a "fp32" label never hides bf16.  int8 is NNCF
post-training quantization calibrated on ``--data``.  The weights file sits next to the ``.xml``
under the same stem and is moved into place before it.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import enum
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mobilize.accuracy.verify import Kind
from mobilize.core.artifact import Artifact
from mobilize.core.context import Context
from mobilize.core.errors import ConfigError, ExportError, translate_errors
from mobilize.core.packages import require
from mobilize.core.target import CHOSE
from mobilize.exporters.base import Expectation, Exporter
from mobilize.core.text import a

PRECISION_KEY = ["runtime_options", "INFERENCE_PRECISION_HINT"]
"""Where the IR keeps the inference precision it was made for (read by mobilize's openvino runtime)."""


class Precision(enum.StrEnum):
    F32 = "f32"
    BF16 = "bf16"
    F16 = "f16"


class Quantize(enum.StrEnum):
    NONE = "none"
    INT8 = "int8"
    """NNCF post-training quantization (FakeQuantize on activations and weights), calibrated on real samples."""


class Ranges(enum.StrEnum):
    MINMAX = "minmax"
    """Activation ranges from the min and max over all calibration samples (as PT2E and ONNX Runtime's MinMax)."""
    NNCF = "nncf"
    """NNCF's default: averaged per-sample quantiles, robust to outliers but clipping inputs wider than the
    average sample (on the sample photos' crops, 10 dB SQNR where minmax gives 46 dB)."""


class Preset(enum.StrEnum):
    PERFORMANCE = "performance"
    """Symmetric activations and weights (fastest on CPU)."""
    MIXED = "mixed"
    """Asymmetric activations, symmetric weights (better for activations not centred on zero, e.g. after GELU)."""


@dataclasses.dataclass(frozen=True)
class OpenVinoConfig:
    inference_precision: Precision = Precision.F32
    """The precision OpenVINO's CPU plugin computes float layers in: f32 (pinned, never a silent bf16), bf16
    (AMX / AVX512-BF16 CPUs) or f16 (CPUs with AVX512-FP16 or AMX-FP16, ARM with fp16 arithmetic)."""
    fp16_weights: bool = False
    """Store float weights as fp16 in the .bin (half the size; OpenVINO decompresses them at load)."""
    quantize: Quantize = Quantize.NONE
    preset: Preset = Preset.PERFORMANCE
    activation_ranges: Ranges = Ranges.MINMAX
    """int8: how NNCF sets activation ranges from the calibration statistics."""
    calibration_samples: int = 100
    """int8: samples from ``--data`` for NNCF's statistics (seeded random inputs without data, noted)."""
    fast_bias_correction: bool = True
    """int8: NNCF's fast bias correction (else the slower full one)."""
    overflow_fix: bool | None = None
    """int8: every MatMul's and convolution's weights in half the 8-bit range (NNCF's ``OverflowFix.ENABLE``), so the
    int16 sums of x64 kernels without VNNI do not saturate; off: NNCF's default (the first layer only).  None: the
    target decides (on for an x64 CPU without VNNI; a 2-layer encoder's worst cosine to float 0.9865 -> 0.9978 on
    an AVX2-only AMD EPYC)."""

    def __post_init__(self) -> None:
        if self.calibration_samples < 1:
            raise ConfigError(f"calibration_samples must be at least 1, got {self.calibration_samples}")


class OpenVinoExporter(Exporter):
    name = "openvino"
    format = "openvino"
    suffix = ".xml"
    packages = ("openvino",)
    Config = OpenVinoConfig
    source_formats = ("onnx", "exported_program", "openvino")
    """OpenVINO reads ONNX and its own IR files through its frontends; a .pt2 program is loaded first.  Not
    .tflite: its frontend keeps the file's NHWC input, where every other source of this exporter is NCHW."""

    def __init__(self, config: Any = None):
        super().__init__(config)
        self.details: dict[str, Any] = {}
        """Structured facts for reports: ``openvino`` (inference precision, op counts, int8 weights)."""
        self._final: Path | None = None

    @property
    def kind(self) -> Kind:
        cfg = self.config
        if cfg.quantize == Quantize.INT8:
            return Kind.QUANTIZED
        return Kind.REDUCED if cfg.inference_precision != Precision.F32 or cfg.fp16_weights else Kind.FLOAT

    def requires(self, ctx: Context) -> None:
        if ctx.quant.quantized:
            raise ConfigError("the model is already eager-quantized; OpenVINO converts float models and quantizes "
                              "with NNCF itself", hint="drop the eager quantize step and use the openvino-int8 recipe")
        if self.config.quantize == Quantize.INT8:
            require(("nncf",), "NNCF post-training quantization")

    def expectation(self, ctx: Context | None) -> Expectation:
        return Expectation(self.kind)

    def decided(self, ctx: Context) -> dict[str, Any]:
        """overflow_fix left to the target (None): what the target decides (see :meth:`_overflow_fix`)."""
        if self.config.quantize != Quantize.INT8 or self.config.overflow_fix is not None:
            return {}
        return {"overflow_fix": bool(ctx.target.reduce_range)}

    def _overflow_fix(self, ctx: Context) -> bool:
        """As ONNX Runtime's reduce_range (x64 int8 kernels without VNNI saturate int16 sums): the *target* decides
        (``--target``), never silently the machine that builds the file."""
        target, asked = ctx.target, self.config.overflow_fix
        if asked is None and target.reduce_range:
            self.note(f"{CHOSE}NNCF's overflow fix on every layer (weights in half the 8-bit range) where NNCF "
                      f"applies it to the first layer only, decided by the CPU feature: {target.int8_feature()}; "
                      "without VNNI the CPU plugin's int8 kernels sum pairs of 8-bit products in int16, which "
                      "saturates and costs accuracy; use --target x86-vnni or arm64 for devices with int8 dot products")
            return True
        if asked is None:
            self.note(f"NNCF's overflow fix on the first layer only (its default), decided by the CPU feature: "
                      f"{target.int8_feature()}")
        elif not asked and target.reduce_range:
            self.note(f"warning: overflow_fix is off for target {target.describe()}, an x64 CPU without VNNI: int8 "
                      "products may saturate and cost accuracy there")
        return bool(asked)

    def export(self, module: Any, ctx: Context, stem: str | Path, recipe: dict | None = None) -> Artifact:
        stem = Path(stem)
        self._final = stem if stem.name.endswith(self.suffix) else stem.with_name(stem.name + self.suffix)
        return super().export(module, ctx, stem, recipe)

    def write(self, module: Any, ctx: Context, path: Path) -> None:
        import openvino as ov

        cfg = self.config
        model = self._convert(module, ctx)
        if cfg.quantize == Quantize.INT8:
            from mobilize.backends.openvino.quant import nncf_quantize

            samples = ctx.calibration_batches(cfg.calibration_samples)
            model, notes = nncf_quantize(model, samples, str(cfg.preset), cfg.fast_bias_correction,
                                         minmax=cfg.activation_ranges == Ranges.MINMAX,
                                         overflow_fix=self._overflow_fix(ctx))
            source = ctx.calibration_source
            self.note(f"int8: NNCF post-training quantization ({cfg.preset} preset, {cfg.activation_ranges} "
                      f"activation ranges"
                      f"{', fast bias correction' if cfg.fast_bias_correction else ''}), calibrated on "
                      f"{len(samples)} samples from {source}")
            for text in notes:
                self.note(text)
        model.set_rt_info(str(cfg.inference_precision), PRECISION_KEY)
        canonical_names(model)
        final = self._final or path
        with tempfile.TemporaryDirectory(prefix=".mobilize-ov-", dir=path.parent) as tmp:
            xml = Path(tmp) / "model.xml"
            ov.save_model(model, str(xml), compress_to_fp16=cfg.fp16_weights)
            # The .bin goes in first (an .xml never points at a missing or stale .bin), then the .xml at ``path``,
            # which the base class renames to ``final`` on success.
            os.replace(xml.with_suffix(".bin"), final.with_suffix(".bin"))
            shutil.move(str(xml), str(path))
        self._describe(model)

    # -- steps ----------------------------------------------------------------------------
    def _convert(self, module: Any, ctx: Context) -> Any:
        """``openvino.convert_model`` on a PyTorch module, a .pt2 program or an .onnx or IR file, with
        static input shapes."""
        import openvino as ov
        import torch

        from mobilize.lowering.onnx_export import native_output

        example = ctx.example_inputs()
        shapes = [ov.PartialShape(list(s.shape)) for s in ctx.input_specs]
        if isinstance(module, Artifact):
            if module.format not in self.source_formats:
                raise ConfigError(f"the openvino exporter takes a PyTorch model, a .pt2 program, an .onnx or an OpenVINO "
                                  f".xml file, not {a(str(module.format))} file ({module.path.name})")
            source: Any = (torch.export.load(str(module.path)) if module.format == "exported_program"
                           else str(module.path))
            what = module.path.name
        elif isinstance(module, torch.nn.Module):
            if module.training:
                self.note("the model was in training mode; converted a copy in eval mode")
                module = copy.deepcopy(module).eval()
            source, what = module, "the model"
        else:
            raise ConfigError(f"the openvino exporter takes a torch.nn.Module, not {type(module).__name__}")
        lines: list[str] = []
        def failed(exc: Exception) -> str:  # OpConversionFailure, GeneralFailure, RuntimeError ...
            text = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())
            return f"OpenVINO could not convert {what}: {type(exc).__name__}: {text[:400]}"

        with translate_errors(ExportError, "OpenVINO convert_model", message=failed, stage="convert"), \
                native_output(lines), torch.no_grad():
            if isinstance(source, torch.nn.Module):
                model = ov.convert_model(source, example_input=tuple(example), input=shapes)
            elif isinstance(module, Artifact) and module.format == "openvino":  # an IR is read, not converted
                model = ov.Core().read_model(source)
                model.reshape({i: s for i, s in enumerate(shapes)})
            else:
                model = ov.convert_model(source)
                model.reshape({i: s for i, s in enumerate(shapes)})
        return model

    def _describe(self, model: Any) -> None:
        cfg = self.config
        ops = collections.Counter(op.get_type_name() for op in model.get_ordered_ops())
        constants = collections.Counter(str(op.get_output_element_type(0).get_type_name())
                                        for op in model.get_ordered_ops() if op.get_type_name() == "Constant")
        self.details = {"openvino": {"inference_precision": str(cfg.inference_precision),
                                     "fp16_weights": cfg.fp16_weights, "op_counts": dict(ops),
                                     "constant_types": dict(constants), "fake_quantize": ops.get("FakeQuantize", 0)}}
        what = {Precision.F32: "f32 (pinned: OpenVINO's default on AMX / AVX512-BF16 CPUs would be bf16)",
                Precision.BF16: "bf16 (needs AMX or AVX512-BF16; other CPUs run f32)",
                Precision.F16: "f16 (needs AVX512-FP16 / AMX-FP16 on x86 or fp16 arithmetic on ARM; others run f32)"}
        self.note(f"inference precision {what[cfg.inference_precision]}, set explicitly by mobilize's openvino "
                  f"runtime; weights stored as {'fp16' if cfg.fp16_weights else 'fp32'}")
        if cfg.quantize == Quantize.INT8:
            int8 = constants.get("i8", 0) + constants.get("u8", 0)
            self.note(f"int8: {ops.get('FakeQuantize', 0)} FakeQuantize ops, {int8} int8 weight tensors in the IR")


def canonical_names(model: Any) -> None:
    """OpenVINO names what a conversion or NNCF adds from counters of the whole process (``Constant_235303``,
    ``Multiply_12015/fq_weights_1``, the model ``Model356``): renumbered in the graph's order (each number the
    same new one wherever it appears, so distinct names stay distinct), a recipe writes the same .xml at every
    build, whatever the process built before.  The inputs keep their names (.npz arrays are matched by them)."""
    import re

    numbers: dict[str, str] = {}

    def renumber(text: str) -> str:
        return re.sub(r"_(\d+)", lambda m: "_" + numbers.setdefault(m.group(1), str(len(numbers))), text)

    for op in model.get_ordered_ops():
        if op.get_type_name() != "Parameter":
            op.set_friendly_name(renumber(op.get_friendly_name()))
    model.set_friendly_name(re.sub(r"\d+$", "", model.get_friendly_name()) or "Model")
