"""``torchscript``: script (or trace) → freeze → optimize → bundled inputs → ``.pt``.

* ``method: auto`` scripts, and traces (with a note) where scripting fails.
* ``optimize: mobile`` runs ``optimize_for_mobile`` where the torch build has XNNPACK; on a
  build without it the frozen artifact is still written and a note says exactly that and
  points to the ExecuTorch target.  ``optimize: inference`` is refused with a note: its output
  cannot be saved and reloaded on this torch build (``jit.save`` drops the conv weights).
* ``bundled_inputs``: a real sample (from the data source, else seeded random) is bundled with
  ``augment_model_with_bundled_inputs`` so ``mobilize bench x.pt --use_bundled_input 0`` works.
"""

from __future__ import annotations

import dataclasses
import enum
import io
from pathlib import Path
from typing import Any

import torch

from mobilize.lowering.torch_build import xnnpack_enabled
from mobilize.core.errors import ConfigError, UnsupportedModelError, clip, third_party_failure, translate_errors
from mobilize.exporters.base import Exporter
from mobilize.core.context import Context


class Method(enum.StrEnum):
    AUTO = "auto"
    SCRIPT = "script"
    TRACE = "trace"


class Optimize(enum.StrEnum):
    NONE = "none"
    MOBILE = "mobile"
    INFERENCE = "inference"


@dataclasses.dataclass(frozen=True)
class TorchScriptConfig:
    method: Method = Method.AUTO
    freeze: bool = True
    """Inline weights and attributes as constants (torch.jit.freeze)."""
    optimize: Optimize = Optimize.MOBILE
    bundled_inputs: bool = True
    """Bundle one real sample input in the file."""


class TorchScriptExporter(Exporter):
    name = "torchscript"
    format = "torchscript"
    suffix = ".pt"
    Config = TorchScriptConfig

    source_formats = ("torchscript",)
    """A TorchScript file made elsewhere is loaded and frozen / optimized / bundled again as the config says."""

    def write(self, module: Any, ctx: Context, path: Path) -> None:
        from mobilize.runtimes.held_state import StreamStart

        if getattr(module, "format", None) in self.source_formats:
            scripted = self._load_file(module, ctx)
        elif not isinstance(module, torch.nn.Module):
            raise ConfigError(f"exporter '{self.name}' needs a PyTorch model or a TorchScript file, got a "
                              f"{getattr(module, 'format', '?')} file")
        else:
            self._start = StreamStart(module.eval(), self.note)
            scripted = self._program = self._script_or_trace(module, ctx)
        self._start.put_back(self._program)  # a trace ran the model: the file starts a stream, not mid-way
        self.save(self.script(self._with_reset(scripted), ctx), path)

    _start: Any = None
    _program: Any = None
    """The model's program as loaded or scripted (inside a wrapper the lite exporter traces), whose held state
    :class:`~mobilize.runtimes.held_state.StreamStart` keeps."""

    def _load_file(self, art: Any, ctx: Context) -> torch.jit.ScriptModule:
        """The file's program as it was scripted; its bound arguments (``--input sr=16000``) stay arguments, which
        the TorchScript runtime passes by name from the manifest."""
        from mobilize.runtimes.held_state import StreamStart

        with translate_errors(UnsupportedModelError, f"{art.path} is not a loadable TorchScript file"):
            scripted = torch.jit.load(str(art.path), map_location="cpu").eval()
        self.note("loaded from the TorchScript file as it was scripted (not scripted again)")
        self._start, self._program = StreamStart(scripted, self.note), scripted
        return scripted

    def _with_reset(self, scripted: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
        """A wrapper around the program (the lite exporter's bound arguments) given the program's reset method, so
        the file can start a new stream."""
        name = self._start.reset
        if name and scripted is not self._program and name not in scripted._c._method_names():
            scripted.define(f"def {name}(self) -> None:\n    self.program.{name}()\n")
        return scripted

    # A scripted int8 module runs the same int8 kernels as the eager one: the base's float promise holds.

    def script(self, scripted: torch.jit.ScriptModule, ctx: Context) -> torch.jit.ScriptModule:
        """Freeze, optimize and bundle a scripted (or traced) module as the config says."""
        cfg = self.config
        reset = self._start.reset if self._start is not None else None
        kept = [reset] if reset and reset in scripted._c._method_names() else []
        if cfg.freeze:
            scripted = torch.jit.freeze(scripted, preserved_attrs=kept)  # forward only, unless told
        if kept:
            self.note(f"{reset}() kept beside forward: it starts a new stream")
        if cfg.optimize == Optimize.MOBILE:
            if xnnpack_enabled():
                from torch.utils.mobile_optimizer import optimize_for_mobile

                scripted = optimize_for_mobile(scripted, preserved_methods=kept)
                self.note("optimize_for_mobile applied")
            else:
                self.note("optimize_for_mobile skipped: this torch build has no XNNPACK (torch.backends.xnnpack."
                          "enabled is False); the artifact is frozen but not mobile-optimized. The maintained "
                          "mobile path is ExecuTorch: --recipe executorch-fp32 or executorch-int8")
        elif cfg.optimize == Optimize.INFERENCE:
            self.note("optimize_for_inference not applied: on this torch build its output cannot be saved and "
                      "reloaded (jit.save drops the conv weights); apply it after torch.jit.load on the server")
        if cfg.bundled_inputs:
            scripted = self._bundle(scripted, ctx)
        return scripted

    def _script_or_trace(self, module: torch.nn.Module, ctx: Context) -> torch.jit.ScriptModule:
        method = self.config.method
        if method in (Method.AUTO, Method.SCRIPT):
            with third_party_failure("torch.jit.script") as failed:
                return torch.jit.script(module)
            if method == Method.SCRIPT:
                raise UnsupportedModelError(f"torch.jit.script failed: {failed.reason}",
                                            hint="use method: trace, or the executorch/onnx targets") from failed.error
            self.note(f"scripting failed ({clip(failed.reason, 100)}); traced instead: data-dependent control flow is "
                      f"frozen to the example input's path")
        with translate_errors(UnsupportedModelError, "the model can be neither scripted nor traced",
                              hint="try the executorch or onnx exporters"), torch.no_grad():
            return torch.jit.trace(module, tuple(self._example(ctx)))

    def _example(self, ctx: Context) -> list:
        inputs = ctx.calibration_inputs(1)[0] if ctx.data is not None else ctx.example_inputs()
        qparams = ctx.quant.input_qparams if ctx.quant.interface == "full" else None
        if qparams:
            scale, zero_point = qparams
            inputs = [torch.quantize_per_tensor(t, scale, zero_point, torch.quint8) for t in inputs]
        return inputs

    def _bundle(self, scripted: torch.jit.ScriptModule, ctx: Context) -> torch.jit.ScriptModule:
        from torch.utils.bundled_inputs import augment_model_with_bundled_inputs, bundle_large_tensor

        # A frozen module lacks the type info augment_* needs; a save/load round trip restores it.
        buf = io.BytesIO()
        torch.jit.save(scripted, buf)
        buf.seek(0)
        reloaded = torch.jit.load(buf)
        sample = tuple(bundle_large_tensor(t) for t in self._example(ctx))
        augment_model_with_bundled_inputs(reloaded, [sample])
        source = "a real sample from " + ctx.data.reference if ctx.data is not None else "a seeded random input"
        self.note(f"bundled 1 input ({source})")
        return reloaded

    def save(self, scripted: torch.jit.ScriptModule, path: Path) -> None:
        scripted.save(str(path))
