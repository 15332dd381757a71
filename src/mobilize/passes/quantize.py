"""``quantize``: int8 with ``torch.ao.quantization`` — static (calibrated on real samples),
dynamic (Linear/LSTM/GRU) or QAT; engines x86, fbgemm, qnnpack; interface none/core/full.

* ``api: auto`` uses eager mode for models that are already quantizable (QuantStub present,
  residual adds through FloatFunctional) and FX graph mode otherwise, so a user model with
  plain ``x + y`` and no stubs quantizes without being edited.
* ``interface``: ``none`` leaves the model in float; ``core`` quantizes the core and keeps a
  float interface (quantize/dequantize inside the model); ``full`` takes and returns quantized
  tensors (the input scale and zero point are recorded in the notes and manifest).
* ``torch.ao.quantization`` is deprecated upstream; that warning is recorded as a note, and the
  maintained path for mobile is the ExecuTorch PT2E recipe (``executorch-int8``).
"""

from __future__ import annotations

import contextlib
import re
import dataclasses
import enum
import warnings
from typing import Any

import torch
from torch import nn

from mobilize.core.errors import ConfigError, UnsupportedModelError, clip
from mobilize.passes import PASSES
from mobilize.passes.base import Context, Pass, PassConfig


class Mode(enum.StrEnum):
    STATIC = "static"
    DYNAMIC = "dynamic"
    QAT = "qat"


class Engine(enum.StrEnum):
    X86 = "x86"
    FBGEMM = "fbgemm"
    QNNPACK = "qnnpack"


class Interface(enum.StrEnum):
    NONE = "none"
    CORE = "core"
    FULL = "full"


class Api(enum.StrEnum):
    AUTO = "auto"
    EAGER = "eager"
    FX = "fx"


@dataclasses.dataclass(frozen=True)
class QuantizeConfig(PassConfig):
    mode: Mode = Mode.STATIC
    engine: Engine | None = None
    """Kernel library the int8 model targets: qnnpack (ARM phones), x86 / fbgemm (servers).  None: the
    target's (``--target``): qnnpack for arm64, x86 for x86 targets."""
    interface: Interface = Interface.CORE
    api: Api = Api.AUTO
    calibration_samples: int = 32
    """Real samples from the data source used to calibrate activation ranges (static, qat)."""
    qat_epochs: int = 1
    """Fine-tuning passes over the labelled data (qat)."""
    qat_lr: float = 1e-4


@PASSES.register("quantize")
class Quantize(Pass):
    name = "quantize"
    Config = QuantizeConfig

    def requires(self, ctx: Context) -> None:
        if "quantize" in ctx.applied:
            raise ConfigError("step 'quantize' appears twice", hint="keep one quantize step")
        if self.config.mode == Mode.QAT and (ctx.data is None or not ctx.data.labelled):
            raise ConfigError("quantize mode 'qat' fine-tunes on labelled data",
                              hint="give --data with labels (digits, a folder with one subfolder per class, .npz with y)")

    def run(self, module: nn.Module, ctx: Context) -> nn.Module:
        cfg = self.config
        if cfg.interface == Interface.NONE:
            ctx.note(self.name, "interface 'none': the model stays float")
            return module
        if cfg.engine is None:
            cfg = self.config = dataclasses.replace(cfg, engine=Engine(ctx.target.int8_engine))
            ctx.note(self.name, f"engine {cfg.engine}, chosen by target {ctx.target.describe()}")
        if cfg.engine not in torch.backends.quantized.supported_engines:
            raise ConfigError(f"quantized engine '{cfg.engine}' is not in this torch build",
                              hint=f"available: {', '.join(torch.backends.quantized.supported_engines)}")
        torch.backends.quantized.engine = str(cfg.engine)
        if cfg.mode != Mode.DYNAMIC:
            numeric_padding(module, ctx, self.name)  # before calibration: the int8 conv refuses it only at convert
        with _recorded_warnings(ctx, self.name):
            if cfg.mode == Mode.DYNAMIC:
                out = self._dynamic(module, ctx)
            elif self._use_eager(module):
                out = self._eager(module, ctx)
            else:
                out = self._fx(module, ctx)
        ctx.quant = dataclasses.replace(ctx.quant, quantized=True, engine=str(cfg.engine), interface=str(cfg.interface),
                                        mode=str(cfg.mode))
        self._smoke_test(out, ctx)
        return out

    def _smoke_test(self, module: nn.Module, ctx: Context) -> None:
        """Run the int8 model once, so a missing int8 kernel is named here, not as a dispatcher dump later."""
        inputs = ctx.example_inputs()
        if ctx.quant.input_qparams and ctx.quant.interface == "full":
            scale, zero_point = ctx.quant.input_qparams
            inputs = [torch.quantize_per_tensor(t, scale, zero_point, torch.quint8) for t in inputs]
        try:
            with torch.inference_mode():
                module(*inputs)
        except NotImplementedError as exc:
            match = re.search(r"Could not run '([^']+)' with arguments from the '(\w+)' backend", str(exc))
            if not match:
                raise
            raise UnsupportedModelError(
                f"after quantization, op {match.group(1)} gets an int8 tensor but has no {match.group(2)} kernel",
                hint="put a DeQuantStub before it (eager mode), use api: fx, or the executorch-int8 recipe",
            ) from exc

    # -- the three paths -------------------------------------------------------------------
    def _use_eager(self, module: nn.Module) -> bool:
        if self.config.api != Api.AUTO:
            return self.config.api == Api.EAGER
        return any(isinstance(m, torch.ao.quantization.QuantStub) for m in module.modules())

    def _dynamic(self, module: nn.Module, ctx: Context) -> nn.Module:
        if self.config.interface == Interface.FULL:
            raise ConfigError("dynamic quantization keeps a float interface", hint="use interface: core")
        targets = {nn.Linear, nn.LSTM, nn.GRU}
        found = sum(isinstance(m, tuple(targets)) for m in module.modules())
        if not found:
            raise UnsupportedModelError("dynamic quantization found no Linear/LSTM/GRU layer",
                                        hint="use mode: static for convolutional models")
        convs = sum(isinstance(m, nn.Conv2d) for m in module.modules())
        if convs:
            ctx.note(self.name, f"dynamic mode quantizes only the {found} Linear/LSTM/GRU layer(s); "
                                f"{convs} conv layer(s) stay float (use static for CNNs)")
        return torch.ao.quantization.quantize_dynamic(module.eval(), targets, dtype=torch.qint8)

    def _eager(self, module: nn.Module, ctx: Context) -> nn.Module:
        from torch.ao import quantization as tq

        cfg = self.config
        if "fuse" not in ctx.applied and any(isinstance(m, nn.BatchNorm2d) for m in module.modules()):
            ctx.note(self.name, "BatchNorm layers were not fused first; add the fuse step before quantize")
        if cfg.mode == Mode.QAT:
            module.train()
            module.qconfig = tq.get_default_qat_qconfig(str(cfg.engine))
            tq.prepare_qat(module, inplace=True)
            self._finetune(module, ctx)
        else:
            module.eval()
            module.qconfig = tq.get_default_qconfig(str(cfg.engine))
            tq.prepare(module, inplace=True)
            self._calibrate(module, ctx)
        module.eval()
        tq.convert(module, inplace=True)
        ctx.note(self.name, f"{cfg.mode} int8 ({cfg.engine}) in eager mode (the model has QuantStub/DeQuantStub)")
        if cfg.interface == Interface.FULL:
            module = self._strip_stubs(module, ctx)
        return module

    def _fx(self, module: nn.Module, ctx: Context) -> nn.Module:
        from torch.ao.quantization import get_default_qat_qconfig_mapping, get_default_qconfig_mapping
        from torch.ao.quantization.fx.custom_config import PrepareCustomConfig
        from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx, prepare_qat_fx

        cfg = self.config
        example = tuple(ctx.example_inputs())
        custom = PrepareCustomConfig()
        if cfg.interface == Interface.FULL:
            custom.set_input_quantized_indexes(list(range(len(example)))).set_output_quantized_indexes([0])
        try:
            if cfg.mode == Mode.QAT:
                prepared = prepare_qat_fx(module.train(), get_default_qat_qconfig_mapping(str(cfg.engine)), example,
                                          prepare_custom_config=custom)
                self._finetune(prepared, ctx)
            else:
                prepared = prepare_fx(module.eval(), get_default_qconfig_mapping(str(cfg.engine)), example,
                                      prepare_custom_config=custom)
                self._calibrate(prepared, ctx)
        except torch.fx.proxy.TraceError as exc:
            raise UnsupportedModelError(f"FX graph mode cannot trace the model: {str(exc).splitlines()[0]}",
                                        hint="add QuantStub/DeQuantStub and FloatFunctional adds for eager mode, "
                                             "or use the executorch-int8 recipe (torch.export)") from exc
        out = convert_fx(prepared.eval())
        ctx.note(self.name, f"{cfg.mode} int8 ({cfg.engine}) in FX graph mode (no model edits needed)")
        if cfg.interface == Interface.FULL:
            self._record_input_qparams(prepared, ctx)
        return out

    # -- helpers ---------------------------------------------------------------------------
    def _calibrate(self, module: nn.Module, ctx: Context) -> None:
        inputs = ctx.calibration_inputs(self.config.calibration_samples)
        with torch.inference_mode():
            for sample in inputs:
                module(*sample)
        ctx.quant.calibration_samples = len(inputs)

    def _finetune(self, module: nn.Module, ctx: Context) -> None:
        spec = ctx.input_specs[0]
        optimizer = torch.optim.SGD(module.parameters(), lr=self.config.qat_lr, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()
        module.train()
        steps = 0
        for _ in range(self.config.qat_epochs):
            for x, y in ctx.data.batches(spec, batch_size=32):
                optimizer.zero_grad()
                loss = loss_fn(module(x), y)
                loss.backward()
                optimizer.step()
                steps += 1
        ctx.note(self.name, f"QAT fine-tuned {steps} steps on {ctx.data.reference}")

    def _strip_stubs(self, module: nn.Module, ctx: Context) -> nn.Module:
        quant = getattr(module, "quant", None)
        if not isinstance(quant, torch.ao.nn.quantized.Quantize) or not hasattr(module, "dequant"):
            raise UnsupportedModelError("interface 'full' in eager mode needs top-level 'quant'/'dequant' stubs",
                                        hint="use api: fx")
        ctx.quant.input_qparams = (float(quant.scale), int(quant.zero_point))
        ctx.note(self.name, f"interface 'full': input must be quint8 with scale {float(quant.scale):.6g}, "
                            f"zero_point {int(quant.zero_point)}; output is quantized")
        module.quant, module.dequant = nn.Identity(), nn.Identity()
        return module

    def _record_input_qparams(self, prepared: Any, ctx: Context) -> None:
        for name, mod in prepared.named_modules():
            if hasattr(mod, "calculate_qparams") and "activation_post_process_0" in name:
                scale, zp = mod.calculate_qparams()
                ctx.quant.input_qparams = (float(scale), int(zp))
                ctx.note(self.name, f"interface 'full': input must be quint8 with scale {float(scale):.6g}, "
                                    f"zero_point {int(zp)}; output is quantized")
                return


_QUANTIZED_PADDING_MODES = ("zeros", "reflect")
"""Padding modes torch.ao's quantized Conv1d/2d/3d take (``replicate`` and ``circular`` raise at convert)."""


def numeric_padding(module: nn.Module, ctx: Context, step: str) -> None:
    """Rewrite each conv's string padding as the numbers it means, which torch.ao's quantized conv needs (with
    ``padding='same'`` its prepack fails at convert, after calibration, with "conv2d_prepack() Expected a value of
    type 'List[int]' ... found type 'tuple'": the tuple is ``('same', 'same')``); a padding no number expresses
    (``same`` over an even kernel pads one side more) or a padding mode it has no kernel for is refused here,
    every such conv named, with the routes that take it."""
    refused, rewritten = [], []
    for name, conv in module.named_modules():
        if not isinstance(conv, nn.modules.conv._ConvNd) or conv.transposed:
            continue
        if conv.padding_mode not in _QUANTIZED_PADDING_MODES:
            refused.append(f"'{name}' (padding_mode '{conv.padding_mode}')")
        if not isinstance(conv.padding, str):
            continue
        totals = [d * (k - 1) for d, k in zip(conv.dilation, conv.kernel_size)]
        if conv.padding == "same" and any(t % 2 for t in totals):
            refused.append(f"'{name}' (padding='same' over kernel {tuple(conv.kernel_size)} pads one side more)")
            continue
        conv.padding = tuple(t // 2 for t in totals) if conv.padding == "same" else (0,) * len(totals)
        conv._reversed_padding_repeated_twice = [p for p in reversed(conv.padding) for _ in range(2)]
        rewritten.append(f"{name} {conv.padding}")
    if refused:
        raise UnsupportedModelError(
            f"eager int8 (torch.ao) has no quantized conv for {', '.join(refused)}",
            hint="pad explicitly (an nn.ZeroPad2d before the conv, its padding 0), or use the executorch-int8 or "
                 "onnx-int8 recipe, which quantize the exported graph's own pad")
    if rewritten:
        ctx.note(step, f"string padding written as numbers for torch.ao's quantized conv (the same arithmetic): "
                       f"{clip(', '.join(rewritten), 200)}")


@contextlib.contextmanager
def _recorded_warnings(ctx: Context, step: str):
    """Deprecations from torch.ao.quantization become notes instead of vanishing into stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    seen = set()
    for w in caught:
        text = str(w.message).strip().splitlines()[0]
        if "deprecat" in text.lower() and text not in seen:
            seen.add(text)
            ctx.note(step, f"upstream deprecation: {clip(text, 200)}")
