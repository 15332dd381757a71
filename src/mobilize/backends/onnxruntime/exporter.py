"""The ``onnx`` exporter: PyTorch → ONNX, or an ONNX file made elsewhere, then ONNX → ONNX steps.

Export uses ``torch.onnx.export(dynamo=True)`` and falls back to the TorchScript exporter
(with a note saying why); every model passes ``onnx.checker``, shape inference and an ONNX
Runtime load.  Then, as options of the same step: ``quant_pre_process``, static int8 (QDQ,
U8S8, per-channel, calibrated on the data source a few batches at a time) or dynamic int8,
and ``ort_format`` for onnxruntime-mobile.  Intermediate files live in a temp folder.
"""

from __future__ import annotations

import dataclasses
import enum
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from mobilize.core.artifact import Artifact
from mobilize.backends.onnxruntime.encoder import ModelType
from mobilize.backends.onnxruntime.runtime import missing_kernel, upgrade_opset
from mobilize.core.errors import ConfigError, UnsupportedModelError, translate_errors
from mobilize.lowering.onnx_export import check_onnx_model
from mobilize.accuracy.verify import Kind
from mobilize.exporters.base import Expectation, Exporter
from mobilize.core.context import Context
from mobilize.core.target import CHOSE
from mobilize.core.text import a

MIN_OPSET = 7


class Quantize(enum.StrEnum):
    NONE = "none"
    STATIC = "static"
    """int8 QDQ with ranges calibrated on real data: the fast choice for CNNs on CPU."""
    DYNAMIC = "dynamic"
    """int8 weights, activations quantized on every run: for Linear/MatMul-heavy models."""


class Calibration(enum.StrEnum):
    MINMAX = "minmax"
    ENTROPY = "entropy"
    PERCENTILE = "percentile"


class TorchExporter(enum.StrEnum):
    AUTO = "auto"
    """The dynamo exporter; where it fails, the TorchScript exporter (with a note)."""
    DYNAMO = "dynamo"
    TORCHSCRIPT = "torchscript"


@dataclasses.dataclass(frozen=True)
class OnnxConfig:
    opset: int | None = None
    """ai.onnx opset to export to (None: the exporter's default); ONNX sources are converted to it."""
    dynamic_batch: bool = False
    """Make dimension 0 of every input symbolic (PyTorch exports only)."""
    exporter: TorchExporter = TorchExporter.AUTO
    """Which torch.onnx exporter to use."""
    quantize: Quantize = Quantize.NONE
    """none, static (calibrated QDQ int8) or dynamic (int8 weights, runtime activation ranges)."""
    quant_pre_process: bool = True
    """Run onnxruntime's quant_pre_process (shape inference + graph fusions) before quantizing."""
    per_channel: bool = True
    """Static only: one weight scale per output channel (needs opset 13; older models are converted)."""
    reduce_range: bool | None = None
    """7-bit weights.  None: on when the target (``--target``, default this machine) is an x64 CPU without
    VNNI (its U8S8 kernels saturate), else off."""
    calibration: Calibration = Calibration.MINMAX
    """Static only: how activation ranges are chosen from the calibration data."""
    calibration_samples: int = 100
    """Static only: samples read from the data source for calibration."""
    exclude_nodes: tuple[str, ...] = ()
    """Node names to keep in float."""
    exclude_op_types: tuple[str, ...] = ()
    """Op types to keep in float (e.g. Conv, to quantize only MatMul/Gemm dynamically)."""
    model_type: ModelType = ModelType.AUTO
    """Static only: ``transformer`` quantizes only the MatMul/Gemm that read a weight, as the field quantizes an
    encoder; ``generic`` every op ONNX Runtime takes; ``auto`` finds an encoder from the graph
    (:mod:`mobilize.backends.onnxruntime.encoder`)."""
    ort_format: bool = False
    """Write an ``.ort`` file (for onnxruntime-mobile) instead of ``.onnx``."""

    def __post_init__(self) -> None:
        if self.calibration_samples < 1:
            raise ConfigError(f"calibration_samples must be at least 1, got {self.calibration_samples}")
        if self.opset is not None and self.opset < MIN_OPSET:
            raise ConfigError(f"opset {self.opset} is too old", hint=f"use {MIN_OPSET} or newer, or leave it unset")


class OnnxExporter(Exporter):
    name = "onnx"
    format = "onnx"
    suffix = ".onnx"
    packages = ("onnx", "onnxruntime")
    Config = OnnxConfig
    source_formats = ("onnx",)

    def __init__(self, config: Any = None):
        super().__init__(config)
        self.suffix = ".ort" if self.config.ort_format else ".onnx"

    def expectation(self, ctx: Context | None) -> Expectation:
        return Expectation(Kind.FLOAT if self.config.quantize == Quantize.NONE else Kind.QUANTIZED)

    def write(self, module: Any, ctx: Context, path: Path) -> None:
        import onnx

        from mobilize.lowering.onnx_export import check_static_inputs

        with tempfile.TemporaryDirectory(prefix="mobilize-onnx-") as tmp_dir:
            tmp = Path(tmp_dir)
            proto = self._float_model(module, ctx)
            check_static_inputs(proto, ctx.input_specs)
            current = tmp / "float.onnx"
            onnx.save(proto, str(current))
            self._probe(current, ctx)
            if self.config.quantize != Quantize.NONE:
                current = self._quantize(current, proto, ctx, tmp)
            if self.config.ort_format:
                from mobilize.backends.onnxruntime.quant import to_ort_format

                for text in to_ort_format(current, path):
                    self.note(text)
            else:
                shutil.copyfile(current, path)

    # -- stages ---------------------------------------------------------------------------
    def _float_model(self, module: Any, ctx: Context) -> Any:
        from mobilize.lowering.onnx_export import finish_model, opset_of, torch_to_onnx

        cfg = self.config
        if not isinstance(module, Artifact):
            proto, notes = torch_to_onnx(module, ctx.example_inputs(), opset=cfg.opset,
                                         dynamic_batch=cfg.dynamic_batch, exporter=str(cfg.exporter))
            for text in notes:
                self.note(text)
            return proto
        if module.format not in self.source_formats:
            raise ConfigError(f"the onnx exporter takes a PyTorch model or an .onnx file, not {a(str(module.format))} file")
        proto = load_onnx_file(module.path)
        if cfg.dynamic_batch:
            self.note("dynamic_batch applies to PyTorch exports; the ONNX source keeps its input shapes")
        if cfg.opset is not None and cfg.opset != opset_of(proto):
            from mobilize.backends.onnxruntime.quant import convert_opset

            self.note(f"converted the model from opset {opset_of(proto)} to {cfg.opset}")
            proto = finish_model(convert_opset(proto, cfg.opset, "leave opset unset to keep the model's own"),
                                 f"{module.path.name} at opset {cfg.opset}")
        return proto

    def _probe(self, path: Path, ctx: Context) -> None:
        """Load the float model in ONNX Runtime: a clear error here if it cannot."""
        from mobilize.runtimes.base import RuntimeOptions
        from mobilize.backends.onnxruntime.runtime import OnnxRuntimeSession

        OnnxRuntimeSession.load(Artifact(path=path, format="onnx"), RuntimeOptions(threads=1)).close()

    def _quantize(self, src: Path, proto: Any, ctx: Context, tmp: Path) -> Path:
        import onnx

        from mobilize.backends.onnxruntime import quant as q
        from mobilize.lowering.onnx_export import opset_of

        cfg = self.config
        constants = q.constant_initializers(proto)
        if constants:
            self._notes(constants)
            src = tmp / "float-constants.onnx"
            onnx.save(proto, str(src))
        opts = q.StaticOptions(str(cfg.calibration), cfg.per_channel, self._reduce_range(ctx),
                               tuple(cfg.exclude_nodes), tuple(cfg.exclude_op_types), str(cfg.model_type))
        if cfg.quantize == Quantize.STATIC and cfg.per_channel and opset_of(proto) < q.PER_CHANNEL_MIN_OPSET:
            self.note(f"converted opset {opset_of(proto)} to {q.PER_CHANNEL_MIN_OPSET} for per-channel QDQ weights")
            src = tmp / "opset13.onnx"
            onnx.save(q.convert_opset(proto, q.PER_CHANNEL_MIN_OPSET, "set per_channel: false"), str(src))
        if cfg.quant_pre_process:
            pre = tmp / "pre.onnx"
            self._notes(q.pre_process(src, pre))
            src = pre
        else:
            self.note("quant_pre_process is off: unfused patterns and unknown shapes may stay in float")
        model = onnx.load(str(src))
        out = tmp / "int8.onnx"
        if cfg.quantize == Quantize.DYNAMIC:
            self._notes(q.quantize_dynamic_int8(src, out, opts))
            return out
        batch = ctx.input_specs[0].shape[0]
        feed = q.BatchFeed(model, self._calibration_batches(model, ctx))
        self._notes(q.quantize_static_qdq(src, out, feed, opts, batch))
        return out

    def decided(self, ctx: Context) -> dict[str, Any]:
        """reduce_range left to the target (None): what the target decides (see :meth:`_reduce_range`)."""
        if self.config.quantize == Quantize.NONE or self.config.reduce_range is not None:
            return {}
        return {"reduce_range": bool(ctx.target.reduce_range)}

    def _reduce_range(self, ctx: Context) -> bool:
        """x64 without VNNI sums pairs of uint8 x int8 products in int16 (vpmaddubsw), which saturates.
        The *target* decides (``--target``), never silently the machine that builds the file."""
        target = ctx.target
        if not target.reduce_range:
            if self.config.reduce_range:
                self.note(f"reduce_range on (7-bit weights) as configured; target {target.describe()} does not need it")
            elif self.config.reduce_range is None:
                self.note(f"reduce_range off (8-bit weights, ONNX Runtime's default), decided by the CPU feature: "
                          f"{target.int8_feature()}")
            return bool(self.config.reduce_range)
        if self.config.reduce_range is None:
            self.note(f"{CHOSE}reduce_range on (7-bit weights) where ONNX Runtime's quantize_static defaults to off, "
                      f"decided by the CPU feature: {target.int8_feature()}; without VNNI ONNX Runtime's U8S8 kernels "
                      "sum pairs of 8-bit products in int16 (vpmaddubsw), which saturates and costs accuracy with "
                      "full 8-bit weights (mobilize tune measures the stock default beside it); use --target "
                      "x86-vnni or arm64 for devices with int8 dot products")
            return True
        if not self.config.reduce_range:
            self.note(f"warning: reduce_range is off for target {target.describe()}, an x64 CPU without VNNI: U8S8 "
                      "products may saturate and cost accuracy there")
        return self.config.reduce_range

    def _calibration_batches(self, model: Any, ctx: Context) -> Iterator[list]:
        from mobilize.lowering.onnx_export import real_inputs

        n = self.config.calibration_samples
        if ctx.data is None:
            self.note("calibrating on 8 seeded random inputs (no --data given): int8 ranges from random data are "
                      "poor; give --data with real samples")
            yield from ctx.carried_states([ctx.example_inputs(seed) for seed in range(min(n, 8))])
            return
        if len(ctx.input_specs) != 1 or ctx.data.inputs_per_sample != 1:  # an .npz with one array per input
            batches = ctx.calibration_batches(n)
            self.note(f"calibrating on {len(batches)} batch(es) from {ctx.calibration_source}")
            yield from batches
            return
        spec, inp = ctx.input_specs[0], real_inputs(model)[0]
        mismatch = _data_mismatch(ctx, inp.name)
        if mismatch:
            raise ConfigError(mismatch, hint="image data needs an N,1,H,W or N,3,H,W input; or give an .npz of "
                                             "model inputs")
        dim0 = inp.type.tensor_type.shape.dim[0]
        fixed_batch = dim0.HasField("dim_value") and dim0.dim_value > 0
        for x, _ in ctx.data.batches(spec, limit=n):
            if fixed_batch and x.shape[0] != spec.shape[0]:
                self.note(f"dropped a last calibration batch of {x.shape[0]}: input '{inp.name}' has a fixed "
                          f"batch of {spec.shape[0]}")
                return
            yield [x]

    def _notes(self, texts: list[str]) -> None:
        for text in texts:
            self.note(text)


def _data_mismatch(ctx: Context, input_name: str) -> str | None:
    """Why the data source cannot feed the model's one input, or None."""
    spec, data = ctx.input_specs[0], ctx.data
    if len(spec.shape) != 4:
        return f"calibration data '{data.reference}' gives images, but input '{input_name}' is {spec}"
    if spec.shape[1] not in (1, 3) and data.name != "npz":  # an .npz may hold ready model inputs
        return (f"calibration data '{data.reference}' gives RGB images, but input '{input_name}' has "
                f"{spec.shape[1]} channels ({spec})")
    return None


def _u8s8_saturates() -> bool:
    """True when this machine is an x64 CPU without VNNI (AVX2-only U8S8 kernels)."""
    from mobilize.core.target import host_target

    return host_target().reduce_range


def load_onnx_file(path: Path, notes: list[str] | None = None) -> Any:
    """Load and check an ONNX file made elsewhere; ``.ort`` files cannot be used as a source.  Old opsets
    ONNX Runtime has no kernels for are upgraded (checked against the original; the note goes to ``notes``)."""
    import onnx

    if path.suffix.lower() == ".ort":
        raise ConfigError(f"{path} is an ORT-format file; ONNX→ONNX steps need the .onnx model it came from")
    with translate_errors(UnsupportedModelError, f"cannot read {path} as an ONNX model"):  # DecodeError, OSError
        proto = onnx.load(str(path))
    check_onnx_model(proto, str(path))
    error = missing_kernel(proto.SerializeToString())
    if error:
        proto, note = upgrade_opset(proto, error, str(path))
        if notes is not None:
            notes.append(note)
    return proto
