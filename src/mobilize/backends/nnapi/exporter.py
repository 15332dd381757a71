"""``nnapi``: the PyTorch NNAPI tutorial as one exporter: the NNAPI file, its CPU twin, the adb script.

Three modes, as in the tutorial: ``none`` (float), ``core`` (a quantized NNAPI model between a CPU
quantizer and dequantizer: float in and out) and ``full`` (quint8 in and out).  Dropout is removed
and BatchNorm folded for inference (torch.jit.freeze folds BN into the conv it follows), the input
is channels-last with ``nnapi_nhwc``, the model is traced and converted with
``torch.backends._nnapi.prepare.convert_model_to_nnapi``, wrapped, bundled with one input and saved
for the lite interpreter as ``<stem>.nnapi.ptl``.  Beside it:

* ``<stem>.cpu.ptl``: the CPU twin (the same traced model and quantization, frozen, for the lite
  interpreter; what the phone runs without NNAPI), with the same bundled input;
* ``nnapi_benchmark.sh``: adb push / speed_benchmark_torch / adb pull / ``mobilize bench --from-log``
  for every NNAPI file in the folder and its twin.

Before anything is built, every op the converter cannot take is listed at once with its module
path and a replacement (:mod:`mobilize.backends.nnapi.check`).  After writing, the NNAPI file
runs through the host interpreter (runtime ``nnapi_host``) and the twin through the lite
interpreter on the same inputs (:mod:`mobilize.backends.nnapi.host_check`): float by rule float-sqnr;
quantized operation by operation (rule op-steps) and end to end in output steps against the rounding
model of the file itself (rule output-steps).  NNAPI runs only on Android;
it is deprecated from Android 15: the notes say so and name ExecuTorch delegates and LiteRT.

The model for ``core`` and ``full`` comes quantized from the ``quantize`` pass (engine qnnpack: the
converter takes per-tensor weights only), with either interface: this exporter strips or adds the
quantizer around the core as the mode asks.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mobilize.accuracy.verify import Kind
from mobilize.core.artifact import Artifact, atomic_path
from mobilize.core.context import Context
from mobilize.core.errors import (AccuracyError, ConfigError, ExportError, UnsupportedModelError, translate_errors,
                             typed_headline)
from mobilize.exporters.base import Expectation, Exporter
from mobilize.backends.nnapi import nnapi_format as fmt


class Mode(enum.StrEnum):
    AUTO = "auto"
    NONE = "none"
    CORE = "core"
    FULL = "full"


class Preference(enum.StrEnum):
    LOW_POWER = "low_power"
    FAST_SINGLE_ANSWER = "fast_single_answer"
    SUSTAINED_SPEED = "sustained_speed"


class Output(enum.StrEnum):
    NNAPI = "nnapi"
    CPU_TWIN = "cpu_twin"


_PREFERENCE_CODES = {Preference.LOW_POWER: 0, Preference.FAST_SINGLE_ANSWER: 1, Preference.SUSTAINED_SPEED: 2}


@dataclasses.dataclass(frozen=True)
class NnapiConfig:
    mode: Mode = Mode.AUTO
    """none: float NNAPI model; core: quantized NNAPI model between a CPU quantizer and dequantizer (float in/out);
    full: quantized NNAPI model, quint8 in and out; auto: none for a float model, core for a quantized one."""
    artifact: Output = Output.NNAPI
    """Which file the export returns (the other is written beside it): the NNAPI file or its CPU twin (a plan
    variant that times the twin)."""
    bundled_inputs: bool = True
    """Bundle one input (a real sample with --data) for ``speed_benchmark_torch --use_bundled_input=0``."""
    host_check: bool = True
    """Run the NNAPI file (host interpreter) and its twin (lite interpreter) on the same inputs and compare."""
    compilation_preference: Preference = Preference.SUSTAINED_SPEED
    """What the NNAPI driver optimizes for on the phone (ANEURALNETWORKS_PREFER_*)."""
    relax_f32_to_f16: bool = False
    """Let NNAPI compute float32 in float16 on the phone (the host interpreter computes float32)."""
    adb_script: bool = True
    """(Re)write nnapi_benchmark.sh in the output folder."""


KNOWN_DIFFERENCES = {
    "AVERAGE_POOL_2D": "NNAPI's AVERAGE_POOL_2D leaves the padding out of each average, while torch's avg_pool2d "
                       "counts it (count_include_pad=True), and the converter passes the padding on as is: use "
                       "padding=0 in avg_pool2d (AdaptiveAvgPool2d(1) is fine)",
}
"""What the converter gets wrong that the host check has caught, by NNAPI operation: the fix to suggest."""


class BundleWrapper(nn.Module):
    """The tutorial's one-input wrapper that carries the bundled input."""

    def __init__(self, mod: nn.Module):
        super().__init__()
        self.mod = mod

    def forward(self, arg: torch.Tensor):
        return self.mod(arg)


@dataclasses.dataclass
class _Built:
    mode: Mode
    traced: Any
    quantize: tuple[float, int] | None
    """The CPU quantizer (scale, zero point) of mode core; the quint8 input qparams of mode full."""
    example: list
    """The bundled input, as the file takes it."""
    payload: fmt.Payload
    probe: Any
    """The frozen graph the converter read, with the value behind each NNAPI operand (for the host check)."""


class NnapiExporter(Exporter):
    name = "nnapi"
    format = "nnapi"
    suffix = ".ptl"
    Config = NnapiConfig

    def __init__(self, config: Any = None):
        super().__init__(config)
        self.details: dict[str, Any] = {}
        self._built: _Built | None = None

    # -- what the file promises ----------------------------------------------------------------------
    def mode(self, ctx: Context | None) -> Mode:
        if self.config.mode != Mode.AUTO:
            return Mode(self.config.mode)
        return Mode.CORE if ctx is not None and ctx.quant.quantized else Mode.NONE

    def requires(self, ctx: Context) -> None:
        mode, quant = self.mode(ctx), ctx.quant
        if mode == Mode.NONE and quant.quantized:
            raise ConfigError("nnapi mode 'none' converts a float model, but the recipe quantized it",
                              hint="drop the quantize step, or use nnapi mode core or full")
        if mode != Mode.NONE and not quant.quantized:
            raise ConfigError(f"nnapi mode '{mode}' converts a quantized model; the recipe has no quantize step",
                              hint="add `quantize: {mode: static, engine: qnnpack, interface: core}` before the export")
        if quant.quantized and quant.mode == "dynamic":
            raise ConfigError("the NNAPI converter takes static int8 only (it has no dynamic quantized linear)",
                              hint="use quantize mode: static")
        if quant.quantized and quant.engine != "qnnpack":
            raise ConfigError(f"the NNAPI converter takes per-tensor int8 weights; engine '{quant.engine}' quantizes "
                              f"them per channel", hint="set engine: qnnpack in the quantize step (or --engine qnnpack)")
        if mode != Mode.NONE and len(ctx.input_specs) != 1:
            raise ConfigError(f"nnapi mode '{mode}' quantizes one input; the model takes {len(ctx.input_specs)}")
        if mode == Mode.FULL and self.config.artifact == Output.CPU_TWIN:
            raise ConfigError("the full mode's CPU twin takes quint8 input, and mobilize checks artifacts with float "
                              "samples", hint="use mode core's twin (the same quantized core with a float interface); "
                                              "the full twin is still written beside every mode-full NNAPI file")

    def expectation(self, ctx: Context | None) -> Expectation:
        if self.config.artifact == Output.CPU_TWIN or self.mode(ctx) == Mode.NONE:
            kind = Kind.REDUCED if self.config.relax_f32_to_f16 and self.config.artifact == Output.NNAPI else Kind.FLOAT
            return Expectation(kind)
        # NNAPI's int8 arithmetic rounds differently from the qnnpack kernels the module runs on.
        return Expectation(Kind.QUANTIZED)

    # -- the NNAPI file -------------------------------------------------------------------------------
    def export(self, module: Any, ctx: Context, stem: str | Path, recipe: dict | None = None) -> Artifact:
        stem = Path(stem)
        base = stem if stem.name.endswith(self.suffix) else stem.with_name(stem.name + ".nnapi")
        art = super().export(module, ctx, base, recipe)
        notes_before = len(self.notes)
        with translate_errors(ExportError, f"exporter '{self.name}'", stage="export", message=lambda exc: (
                f"exporter '{self.name}' wrote {art.path.name} but failed beside it: {typed_headline(exc)}")):
            twin = self._after(art, ctx, recipe)
        art.notes += self.notes[notes_before:]
        art.input_specs = twin.input_specs = [_channels_last(s) for s in art.input_specs]  # as bundled, as converted
        art.write_manifest()
        twin.write_manifest()
        if self.config.artifact == Output.CPU_TWIN:
            twin.notes = list(ctx.notes) + self.notes + [f"{self.name}: this is the CPU twin of {art.path.name}"]
            twin.write_manifest()
            return twin
        return art

    def write(self, module: Any, ctx: Context, path: Path) -> None:
        if not isinstance(module, nn.Module):
            raise ConfigError(f"exporter '{self.name}' needs a PyTorch model, got a {getattr(module, 'format', '?')} file")
        mode = self.mode(ctx)
        core, quantize = self._core(module, ctx, mode)
        sample = ctx.calibration_inputs(1)[0] if ctx.data is not None else ctx.example_inputs()
        core_inputs = [_nhwc(_quantized(t, quantize) if quantize else t) for t in sample]
        with translate_errors(UnsupportedModelError, "torch.jit.trace failed on the model",
                              hint="the NNAPI converter needs a traceable model"), torch.no_grad():
            traced = torch.jit.trace(core, tuple(core_inputs), check_trace=False)
        converted, serializer = self._convert(traced, core_inputs)
        file_inputs = core_inputs if mode != Mode.CORE else [_nhwc(t) for t in sample]
        top = nn.Sequential(torch.ao.nn.quantized.Quantize(quantize[0], quantize[1], torch.quint8), converted,
                            torch.ao.nn.quantized.DeQuantize()) if mode == Mode.CORE else converted
        self._save(top, file_inputs, path, "NNAPI file")
        from mobilize.backends.nnapi.host_check import Probe

        self._built = _Built(mode, traced, quantize, file_inputs, fmt.payload_of(converted.mod),
                             Probe.from_serializer(serializer))
        ops = fmt.parse_model(converted.mod.ser_model).operation_names()
        self.details["nnapi"] = {"mode": str(mode), "operations": len(ops), "interface": _interface(mode, quantize)}
        self.note(f"mode {mode}: {_interface(mode, quantize)}; {len(ops)} NNAPI operations "
                  f"({', '.join(sorted(set(ops)))})")

    def _core(self, module: nn.Module, ctx: Context, mode: Mode) -> tuple[nn.Module, tuple[float, int] | None]:
        """The module to trace (float, or the quantized core taking quint8) and its input qparams."""
        module = copy.deepcopy(module).eval()
        dropped = _remove_dropout(module)
        if dropped:
            self.note(f"removed {dropped} Dropout layer(s) for inference")
        if mode == Mode.NONE:
            return module, None
        if ctx.quant.interface == "full":
            if ctx.quant.input_qparams is None:
                raise UnsupportedModelError("the quantized model's input scale and zero point are unknown")
            return module, ctx.quant.input_qparams
        return _strip_interface(module)

    def _convert(self, traced: Any, inputs: list) -> Any:
        from torch.backends._nnapi.prepare import convert_model_to_nnapi

        from mobilize.backends.nnapi.check import CheckingSerializer, UnsupportedOps, describe

        serializer = CheckingSerializer()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                preference = _PREFERENCE_CODES[self.config.compilation_preference]
                converted = convert_model_to_nnapi(traced, inputs, serializer=serializer,
                                                   compilation_preference=preference,
                                                   relax_f32_to_f16=self.config.relax_f32_to_f16)
            return converted, serializer
        except UnsupportedOps as exc:
            message, hint = describe(exc.ops)
            err = UnsupportedModelError(message, hint=hint, stage="nnapi-convert")
            err.unsupported = [op.to_json() for op in exc.ops]
            raise err from None

    def _save(self, top: nn.Module, inputs: list, path: Path, what: str, freeze: bool = False) -> None:
        import io

        from torch.utils.bundled_inputs import augment_model_with_bundled_inputs, bundle_large_tensor

        from mobilize.lowering.torch_build import xnnpack_enabled

        scripted = torch.jit.script(BundleWrapper(top) if len(inputs) == 1 else top)
        if freeze:  # the twin: frozen (and mobile-optimized where the build can), as the tutorial's CPU model
            scripted = torch.jit.freeze(scripted.eval())
            if xnnpack_enabled():
                from torch.utils.mobile_optimizer import optimize_for_mobile

                scripted = optimize_for_mobile(scripted)
            buf = io.BytesIO()  # a frozen module lacks the type info augment_* needs; a round trip restores it
            torch.jit.save(scripted, buf)
            buf.seek(0)
            scripted = torch.jit.load(buf)
        if self.config.bundled_inputs:
            if len(inputs) == 1:
                augment_model_with_bundled_inputs(scripted, [(bundle_large_tensor(inputs[0]),)])
            elif what == "NNAPI file":
                self.note(f"no bundled input: the wrapper bundles one input, the model takes {len(inputs)}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scripted._save_for_lite_interpreter(str(path))

    # -- beside it: the twin, the script, the host check ----------------------------------------------
    def _after(self, art: Artifact, ctx: Context, recipe: dict | None) -> Artifact:
        built = self._built
        twin_path = fmt.nnapi_twin_path(art.path)
        q = built.quantize
        top = nn.Sequential(torch.ao.nn.quantized.Quantize(q[0], q[1], torch.quint8), built.traced,
                            torch.ao.nn.quantized.DeQuantize()) if built.mode == Mode.CORE else built.traced
        with atomic_path(twin_path) as tmp:
            self._save(top, built.example, tmp, "CPU twin", freeze=True)
        twin = Artifact(path=twin_path, format="lite", input_specs=list(ctx.input_specs), recipe=recipe,
                        notes=[f"{self.name}: CPU twin of {art.path.name} (same traced model and quantization, "
                               f"frozen, lite interpreter)"])
        twin.write_manifest()
        from mobilize.lowering.torch_build import xnnpack_enabled

        self.note(f"CPU twin: {twin_path.name}" + ("" if xnnpack_enabled() else
                  " (optimize_for_mobile not applied: this torch build has no XNNPACK)"))
        self.details["nnapi"]["cpu_twin"] = str(twin_path)
        self._device_note(art)
        if self.config.host_check:
            self._host_check(art, twin, ctx)
        if self.config.adb_script:
            from mobilize.backends.nnapi.adb import write_adb_script

            script = write_adb_script(art.path.parent)
            self.details["nnapi"]["adb_script"] = str(script)
            self.note(f"on-device benchmark: sh {script} (adb push, speed_benchmark_torch, adb pull, "
                      f"mobilize bench --from-log)")
        self.note(fmt.DEPRECATION)
        return twin

    def _device_note(self, art: Artifact) -> None:
        reason = fmt.device_runtime_status(self._built.payload)
        status = "the real NNAPI runtime compiled it here" if reason is None else f"not here: {reason}"
        self.details["nnapi"]["device_runtime"] = status
        self.note(f"{art.path.name} runs on Android's NNAPI runtime only ({status}); its numbers are checked on "
                  f"this host by mobilize's NNAPI interpreter (runtime nnapi_host); latency: on device only")

    def _host_check(self, art: Artifact, twin: Artifact, ctx: Context) -> None:
        from mobilize.backends.nnapi.host_check import compare_with_twin

        built = self._built
        result = compare_with_twin(art, twin, ctx, built.probe, built.payload, built.quantize, built.mode == Mode.FULL)
        self.details["nnapi"]["host_check"] = result
        self.note(f"host check: {result['summary']}")
        if not result["ok"]:
            worst = (result.get("per_operation") or {}).get("worst_op") or ""
            hint = KNOWN_DIFFERENCES.get(worst.split(" #")[0], "the converter (or mobilize's interpreter) disagrees "
                                                              "with torch on that op; see details.nnapi.host_check")
            raise AccuracyError(f"the NNAPI file does not compute what its CPU twin computes: {result['summary']}",
                                hint=hint, stage="nnapi-host-check")


def _interface(mode: Mode, quantize: tuple[float, int] | None) -> str:
    if mode == Mode.NONE:
        return "float32 in, float32 out"
    scale, zero_point = quantize
    if mode == Mode.CORE:
        return (f"float32 in, float32 out; quantized core (the CPU quantizes the input to quint8, scale {scale:.6g}, "
                f"zero point {zero_point}, and dequantizes the output)")
    return f"quint8 in (scale {scale:.6g}, zero point {zero_point}), quint8 out"


def _channels_last(spec: Any) -> Any:
    from mobilize.core.inputs import MemoryFormat

    return dataclasses.replace(spec, memory_format=MemoryFormat.CHANNELS_LAST) if len(spec.shape) == 4 else spec


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    if t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
        t.nnapi_nhwc = True
    return t


def _quantized(t: torch.Tensor, qparams: tuple[float, int]) -> torch.Tensor:
    return torch.quantize_per_tensor(t.float(), qparams[0], qparams[1], torch.quint8)


def _remove_dropout(module: nn.Module) -> int:
    count = 0
    for name, child in list(module.named_modules()):
        if isinstance(child, nn.modules.dropout._DropoutNd) and name:
            parent_name, _, attr = name.rpartition(".")
            setattr(module.get_submodule(parent_name) if parent_name else module, attr, nn.Identity())
            count += 1
    return count


def _strip_interface(module: nn.Module) -> tuple[nn.Module, tuple[float, int]]:
    """The quantized core of a float-interface module: its input quantizer removed (and its qparams kept)."""
    quant = getattr(module, "quant", None)
    if isinstance(quant, torch.ao.nn.quantized.Quantize) and isinstance(getattr(module, "dequant", None),
                                                                         torch.ao.nn.quantized.DeQuantize):
        module.quant, module.dequant = nn.Identity(), nn.Identity()
        return module, (float(quant.scale), int(quant.zero_point))
    if isinstance(module, torch.fx.GraphModule):
        return _strip_fx_interface(module)
    raise UnsupportedModelError("cannot find the quantized model's input quantizer (a top-level `quant` Quantize and "
                                "`dequant` DeQuantize, or an FX graph starting with quantize_per_tensor)",
                                hint="quantize with interface: full")


def _strip_fx_interface(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, tuple[float, int]]:
    graph, qparams = gm.graph, None
    for node in [n for n in graph.nodes if n.op == "placeholder"]:
        users = list(node.users)
        if len(users) != 1 or users[0].target is not torch.quantize_per_tensor:
            raise UnsupportedModelError(f"the FX-quantized model's input '{node.name}' is not quantized first",
                                        hint="quantize with interface: full")
        q = users[0]
        scale, zero_point = (_fx_value(gm, a) for a in q.args[1:3])
        qparams = (float(scale), int(zero_point))
        q.replace_all_uses_with(node)
        graph.erase_node(q)
    output = next(n for n in graph.nodes if n.op == "output")
    result = output.args[0]
    if isinstance(result, torch.fx.Node) and result.op == "call_method" and result.target == "dequantize":
        output.args = (result.args[0],)
        graph.erase_node(result)
    graph.lint()
    gm.recompile()
    return gm, qparams


def _fx_value(gm: torch.fx.GraphModule, arg: Any) -> Any:
    if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
        return getattr(gm, arg.target)
    return arg
