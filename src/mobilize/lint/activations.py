"""Rule ``activation``: activations other than ReLU, ReLU6, Hardswish and Hardsigmoid.

GELU, SiLU, Mish, ELU, Softplus, Sigmoid and Tanh are transcendental (a lookup table or a polynomial in int8
kernels).  Whether one fuses into the conv before it is each engine's own fact, declared on its descriptor
(``Backend.conv_fused_activations``) and checked on the installed runtime by a test: XNNPACK folds only output
clamps (ReLU, ReLU6, Hardtanh); ONNX Runtime's CPU fusion also folds Sigmoid, Tanh, LeakyReLU and
HardSigmoid, not HardSwish, GELU or ELU.  An activation is found by what it computes, not its class name: a
parameter-free module of another library (transformers' ``SiLUActivation``) is run on a probe tensor and
matched against each activation.  With ``--data`` each one's int8 error is measured on the real samples: its
input and output quantized per-tensor (uint8, min/max calibration over the samples) as an int8 pipeline
would, compared with float, as SQNR in dB.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from mobilize.accuracy.metrics import sqnr_from_powers
from mobilize.lint.graph import BNS, CONVS, ModelView
from mobilize.lint.report import Finding, Rule, Severity

FLAGGED = {
    "gelu": "ReLU (or Hardswish)", "silu": "Hardswish", "swish": "Hardswish", "mish": "Hardswish",
    "elu": "ReLU", "selu": "ReLU", "celu": "ReLU", "softplus": "ReLU", "sigmoid": "Hardsigmoid",
    "tanh": "Hardtanh",
}
"""Activation (lower-case op or class name) -> the clamp-like replacement that fuses and quantizes exactly."""


def kind_of(view: ModelView, item: Any) -> str | None:
    """The flagged activation an nn.Module or a graph node is (``gelu``), else None."""
    if item is None:
        return None
    name = type(item).__name__ if isinstance(item, nn.Module) else view.op_name(item)
    name = name.lower().rstrip("_")
    if name in FLAGGED:
        return name
    return computed_kind(item) if isinstance(item, nn.Module) else None


_PROBE = torch.linspace(-6.0, 6.0, 241).reshape(1, 1, 1, 241)
"""An NCHW-shaped probe: pools, softmax over channels and upsampling take 4-D input (issue #48: AvgPool2d and
Softmax(dim=-3) raised IndexError on a 2-D probe and lint died); an elementwise activation takes any shape."""
_NOT_ELEMENTWISE = (RuntimeError, TypeError, ValueError, NotImplementedError, IndexError, AssertionError)
"""What a user's parameter-free module raises on a probe it does not take: it is then no activation."""
_FUNCTIONS = {
    "gelu": lambda x: torch.nn.functional.gelu(x), "gelu-tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu, "mish": torch.nn.functional.mish, "elu": torch.nn.functional.elu,
    "selu": torch.nn.functional.selu, "celu": torch.nn.functional.celu, "softplus": torch.nn.functional.softplus,
    "sigmoid": torch.sigmoid, "tanh": torch.tanh,
}


def computed_kind(module: nn.Module) -> str | None:
    """The flagged activation a parameter-free elementwise module computes (matched on a probe tensor), else
    None: transformers' ``SiLUActivation`` is silu whatever its class is called."""
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()) or list(module.children()):
        return None
    try:
        with torch.no_grad():
            y = module(_PROBE.clone())
    except _NOT_ELEMENTWISE:  # a pool, a reshape, a module of several inputs: not one-tensor elementwise
        return None
    if not isinstance(y, torch.Tensor) or y.shape != _PROBE.shape:
        return None
    for kind, fn in _FUNCTIONS.items():
        if torch.allclose(y, fn(_PROBE), atol=1e-5, rtol=1e-4):
            return kind.split("-")[0]
    return None


def fusing_engines() -> dict[str, tuple[str, ...]]:
    """Engine label (``ONNX Runtime``) -> the activations its conv fusion folds (each engine's declaration)."""
    from mobilize.core.backend import all_backends

    out = {}
    for b in all_backends():
        if b.conv_fused_activations and b.lint_targets:
            label = b.load(next(iter(b.lint_targets.values()))).LABEL
            out[label] = tuple(b.conv_fused_activations)
    return out


def fusion_text(kind: str, after: str, engines: dict[str, tuple[str, ...]]) -> str:
    """What fuses after ``after`` on each engine, and the clamp that fuses on all of them."""
    fusing = [e for e, acts in engines.items() if kind in acts]
    separate = [e for e, acts in engines.items() if kind not in acts]
    clamp = next((c for c in ("relu6", "relu", "hardtanh") if all(c in acts for acts in engines.values())), None)
    text = f"after {after}: "
    if separate:
        text += f"runs as a separate pass on {' and '.join(separate)}"
        if fusing:
            text += f" (fused into the conv on {' and '.join(fusing)})"
        if clamp:
            text += f"; {_CLAMPS[clamp]} would fuse into the conv on {' and '.join(engines)}"
    else:
        text += f"fused into the conv on {' and '.join(fusing)}"
    return text


_CLAMPS = {"relu6": "ReLU6", "relu": "ReLU", "hardtanh": "Hardtanh"}


def _replacement_fusion(replacement: str, engines: dict[str, tuple[str, ...]]) -> str:
    """`` (fuses into the conv on X; a separate op on Y)`` for the suggested replacement's first choice."""
    kind = replacement.split(" ")[0].lower()
    fusing = [e for e, acts in engines.items() if kind in acts]
    separate = [e for e, acts in engines.items() if kind not in acts]
    parts = ([f"fuses into the conv on {' and '.join(fusing)}"] if fusing else []) + \
            ([f"a separate op on {' and '.join(separate)}"] if separate else [])
    return f" ({replacement.split(' ')[0]}: {'; '.join(parts)})" if parts else ""


def check(view: ModelView) -> list[Finding]:
    sites = _sites(view)
    errors = _int8_errors(view, sites) if view.samples and sites else {}
    engines = fusing_engines() if sites else {}
    findings = []
    for key, (path, kind, node) in sites.items():
        replacement = FLAGGED[kind]
        after = _after_conv(view, node)
        fused = fusion_text(kind, after, engines) if after and engines else "runs as its own op"
        where = "" if node is None or node.op == "call_module" else f" (a {kind}() call in its forward)"
        numbers: dict[str, Any] = {"activation": kind, "replacement": replacement,
                                   "activation_bytes": _bytes(view, path, node)}
        numbers.update(errors.get(key, {}))
        measured = (f"; int8 SQNR {numbers['int8_sqnr_db']:.1f} dB on {numbers['int8_samples']} samples of "
                    f"'{view.data_reference}'" if "int8_sqnr_db" in numbers else "")
        findings.append(Finding(
            Rule.ACTIVATION, Severity.WARN, path,
            f"{kind}{where} is transcendental in int8 (lookup/polynomial, not a clamp){measured}; {fused}",
            f"use {replacement}{_replacement_fusion(replacement, engines) if after else ''}, then fine-tune briefly "
            f"(the swap changes the function)", numbers,
            location=view.location(node) if node is not None else None))
    return findings


def _sites(view: ModelView) -> dict[str, tuple[str, str, Any]]:
    """key -> (module path, activation kind, graph node or None)."""
    sites = {}
    if view.gm is not None:
        for i, node in enumerate(view.nodes):
            if node.op not in ("call_module", "call_function", "call_method"):
                continue
            kind = kind_of(view, view.module_of(node) if node.op == "call_module" else node)
            if kind:
                sites[f"{node.name}"] = (view.owner(node), kind, node)
        return sites
    for path, m in view.modules.items():
        kind = kind_of(view, m)
        if kind and view.calls(path):
            sites[path] = (path, kind, None)
    return sites


def _after_conv(view: ModelView, node) -> str | None:
    """``Conv2d features.3`` when the activation reads a conv (or a conv's BN) directly."""
    if node is None or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    prev = node.args[0]
    m = view.module_of(prev)
    if isinstance(m, BNS) and prev.args and isinstance(prev.args[0], torch.fx.Node):
        prev, m = prev.args[0], view.module_of(prev.args[0])
    return f"{type(m).__name__} {prev.target}" if isinstance(m, CONVS + (nn.Linear,)) else None


def _bytes(view: ModelView, path: str, node) -> int:
    meta = node.meta.get("tensor_meta") if node is not None else None
    if meta is not None and hasattr(meta, "shape"):
        return math.prod(meta.shape) * meta.dtype.itemsize
    st = view.stats.get(path)
    return st.output_bytes if st else 0


# -- measured int8 error -------------------------------------------------------------------------------
def _int8_errors(view: ModelView, sites: dict) -> dict[str, dict[str, Any]]:
    samples = view.samples[:view.config.int8_samples]
    inputs: dict[str, list] = {key: [] for key in sites}
    fns: dict[str, Callable] = {}
    for key, (path, _kind, node) in sites.items():
        fn = _as_function(view, path, node)
        if fn is not None:
            fns[key] = fn
    if view.gm is not None:
        wanted = {sites[k][2]: k for k in fns}
        recorder = _Recorder(view.gm, wanted, inputs)
        with torch.no_grad():
            for sample in samples:
                recorder.run(*sample)
    else:
        handles = [view.modules[sites[k][0]].register_forward_pre_hook(_pre_hook(inputs[k])) for k in fns]
        try:
            with torch.no_grad():
                for sample in samples:
                    view.module(*sample)
        finally:
            for h in handles:
                h.remove()
    out = {}
    for key, fn in fns.items():
        if inputs[key]:
            x = torch.cat([t.reshape(1, -1) for t in inputs[key]], dim=1).float()
            out[key] = {**int8_error(fn, x), "int8_samples": len(inputs[key])}
    return out


def _as_function(view: ModelView, path: str, node) -> Callable | None:
    if node is None or node.op == "call_module":
        m = view.modules[path if node is None else node.target]
        return lambda x: m(x)
    rest = list(node.args[1:])
    if any(isinstance(a, torch.fx.Node) for a in rest + list(node.kwargs.values())):
        return None
    if node.op == "call_method":
        return lambda x: getattr(x, node.target)(*rest, **node.kwargs)
    return lambda x: node.target(x, *rest, **node.kwargs)


class _Recorder(torch.fx.Interpreter):
    """Runs the traced graph and keeps the first input of the wanted nodes."""

    def __init__(self, gm, wanted: dict, inputs: dict):
        super().__init__(gm)
        self.wanted, self.inputs = wanted, inputs

    def run_node(self, n):
        key = self.wanted.get(n)
        if key is not None:
            args, _ = self.fetch_args_kwargs_from_env(n)
            if args and isinstance(args[0], torch.Tensor):
                self.inputs[key].append(args[0].detach().clone())
        return super().run_node(n)


def _pre_hook(store: list):
    def hook(_module, args):
        if args and isinstance(args[0], torch.Tensor):
            store.append(args[0].detach().clone())
    return hook


def fake_quant(t: torch.Tensor, lo: float, hi: float, levels: int = 256) -> torch.Tensor:
    """Per-tensor affine quantize-dequantize over [lo, hi] (zero kept exact, as int8 kernels require)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / (levels - 1) or 1.0
    zero = round(-lo / scale)
    return (torch.clamp(torch.round(t / scale) + zero, 0, levels - 1) - zero) * scale


def int8_error(fn: Callable, x: torch.Tensor) -> dict[str, float]:
    """SQNR (dB) and max abs error of ``fn`` run as int8 would run it: quantized input, quantized output."""
    with torch.no_grad():
        y = fn(x)
        qy = fake_quant(fn(fake_quant(x, float(x.min()), float(x.max()))), float(y.min()), float(y.max()))
    noise = float(((y - qy) ** 2).sum())
    signal = float((y ** 2).sum())
    sqnr = sqnr_from_powers(signal, noise)
    return {"int8_sqnr_db": round(sqnr, 2), "int8_max_abs_error": float((y - qy).abs().max()),
            "output_range": [float(y.min()), float(y.max())]}
