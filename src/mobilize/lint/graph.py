"""What the checks read: the model, its FX graph (where it traces), and what one forward pass measured per module.

One seeded forward pass records, for every module, its input/output shapes, output bytes, calls
and its own MACs (``torch.utils.flop_counter``, the MACs its children do not account for).
``torch.fx`` gives the dataflow (what follows a conv, which ``+`` adds two tensors) with each
node's module path and source line.  Models FX cannot trace still get every module-level check;
the graph-only checks say they were skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from typing import Any

import torch
from torch import nn

from mobilize.core.errors import third_party_failure
from mobilize.lowering.graph import source_location

CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
BNS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
FUSABLE_ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.Hardsigmoid, nn.Hardtanh)
FUSABLE_FUNCTIONS = {"relu", "relu_", "relu6", "hardswish", "hardsigmoid", "hardtanh", "hardtanh_"}
"""Activations backends fuse into the conv before them and quantize exactly (clamps and piecewise-linear)."""
WIDTH_PRESERVING = {"relu", "relu_", "relu6", "hardswish", "hardsigmoid", "hardtanh", "gelu", "silu", "sigmoid",
                    "tanh", "mish", "elu", "dropout", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                    "adaptive_max_pool2d", "flatten", "contiguous", "add", "iadd", "mul", "imul", "batch_norm"}
"""Op names whose output keeps the channel count of their (first) input: a width change flows through them."""
TENSOR_BINARY = {operator.add, operator.iadd, operator.mul, operator.imul, torch.add, torch.mul}
TENSOR_BINARY_METHODS = {"add", "add_", "mul", "mul_"}
"""Elementwise ops that, between two tensors, eager quantization needs as FloatFunctional."""


@dataclasses.dataclass
class ModuleStats:
    """What one forward pass measured for one module (its first call)."""

    path: str
    type_name: str
    calls: int = 0
    input_shapes: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    output_shapes: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    output_bytes: int = 0
    macs: int = 0
    """MACs this module does itself (total minus its children's), summed over its calls."""
    total_macs: int = 0
    params: int = 0
    """Parameters owned directly (not by children)."""


def measure(module: nn.Module, example: list) -> tuple[dict[str, ModuleStats], int]:
    """One forward pass with hooks on every module and a MAC counter: per-module stats, total MACs.

    Every op's MACs go to the innermost module running when it ran (tracked by the same forward hooks), so each
    module's own MACs and its children's partition the total whatever the model's structure or tracing."""
    stats: dict[str, ModuleStats] = {}
    counter = _MacCounter()
    handles = []
    for path, m in module.named_modules():
        st = stats[path] = ModuleStats(path, type(m).__name__,
                                       params=sum(p.numel() for p in m.parameters(recurse=False)))
        handles.append(m.register_forward_pre_hook(counter.enter(path)))
        handles.append(m.register_forward_hook(_recorder(st, counter)))
    try:
        with third_party_failure("lint: counting MACs on fake tensors") as failed:
            _count(module, example, counter, fake=True)
        if failed:  # the model's forward cannot run on fake tensors (data-dependent): run it for real
            for st in stats.values():
                st.calls, st.input_shapes, st.output_shapes, st.output_bytes = 0, [], [], 0
            counter.reset()
            _real_count(module, example, counter)
    finally:
        for h in handles:
            h.remove()
    for path, st in stats.items():
        st.macs = counter.macs.get(path, 0)
        st.total_macs = sum(v for p, v in counter.macs.items() if p == path or not path or p.startswith(path + "."))
    return stats, sum(counter.macs.values())


class _MacCounter:
    """MACs of every op (torch's own FLOP formulas, ``torch.utils.flop_counter.flop_registry``, halved), each given
    to the innermost module whose forward is running (``""``: the model's own forward)."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.flops: dict[str, int] = {}

    @property
    def macs(self) -> dict[str, int]:
        return {path: flops // 2 for path, flops in self.flops.items()}

    def reset(self) -> None:
        self.stack, self.flops = [], {}

    def enter(self, path: str):
        def pre_hook(_module, _inputs):
            self.stack.append(path)
        return pre_hook

    def leave(self, path: str) -> None:
        if path in self.stack:  # the innermost call of this module (a forward that raised may leave others)
            del self.stack[len(self.stack) - 1 - self.stack[::-1].index(path)]

    def add(self, flops: int) -> None:
        where = self.stack[-1] if self.stack else ""
        self.flops[where] = self.flops.get(where, 0) + flops

    def mode(self) -> Any:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import flop_registry

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                formula = flop_registry.get(getattr(func, "_overloadpacket", None))
                if formula is not None:
                    counter.add(int(formula(*args, **kwargs, out_val=out)))
                return out

        return Mode()


def _real_count(module: nn.Module, example: list, counter: _MacCounter) -> None:
    """:func:`_count` on real tensors: a model whose forward fails on its inputs is the user's problem, told
    in one line (as the runtimes' first run tells it); a programming error of ours stays a bug."""
    from mobilize.core.errors import UserError, translate_errors
    from mobilize.runtimes.base import describe_tensor, first_error_line

    shapes = "; ".join(describe_tensor(t) for t in example) or "no inputs"
    with translate_errors(UserError, "lint", stage="lint", hint="check --input_dims against what the model expects",
                          message=lambda exc: f"the model failed on inputs [{shapes}]: {first_error_line(exc)}"):
        _count(module, example, counter, fake=False)


def _count(module: nn.Module, example: list, counter: _MacCounter, fake: bool) -> None:
    """One forward pass under the MAC counter; on fake tensors (shapes only, no arithmetic) when ``fake``."""
    with torch.no_grad(), contextlib.ExitStack() as stack:
        if fake:
            mode = stack.enter_context(_fake_mode())
            example = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in example]
        stack.enter_context(counter.mode())
        module(*example)


def _fake_mode() -> Any:
    # torch._subclasses is torch's own shape-propagation machinery (torch.export runs on it); parameters are
    # converted as they are used, so the module is not copied.
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def _recorder(st: ModuleStats, counter: _MacCounter):
    def hook(_module, inputs, output):
        counter.leave(st.path)
        st.calls += 1
        if st.calls > 1:
            return
        st.input_shapes = [tuple(t.shape) for t in _tensors(inputs)]
        outs = _tensors(output)
        st.output_shapes = [tuple(t.shape) for t in outs]
        st.output_bytes = sum(t.numel() * t.element_size() for t in outs)
    return hook


def _tensors(value: Any) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


@dataclasses.dataclass
class ModelView:
    """The model, its graph and its measurements: what every check reads."""

    module: nn.Module
    example: list
    config: Any
    modules: dict[str, nn.Module]
    stats: dict[str, ModuleStats]
    total_macs: int
    gm: torch.fx.GraphModule | None = None
    trace_error: str | None = None
    samples: list[list] | None = None
    """Real input samples (``--data``), for the measured int8 error; None without data."""
    data_reference: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def build(cls, module: nn.Module, example: list, config: Any, samples: list[list] | None = None,
              data_reference: str | None = None) -> "ModelView":
        stats, total = measure(module, example)
        view = cls(module, example, config, dict(module.named_modules()), stats, total, samples=samples,
                   data_reference=data_reference)
        view.gm, view.trace_error = _trace(module, example)
        if view.gm is None:
            view.notes.append(f"the model is not FX-traceable ({view.trace_error}): the checks that need the dataflow "
                              f"graph (functional activations, x + y adds, what sits between a conv and its BN) "
                              f"looked at modules only")
        return view

    # -- graph helpers ------------------------------------------------------------------------------
    @property
    def nodes(self) -> list[torch.fx.Node]:
        return list(self.gm.graph.nodes) if self.gm is not None else []

    def module_of(self, node: torch.fx.Node) -> nn.Module | None:
        return self.modules.get(node.target) if node.op == "call_module" else None

    def owner(self, node: torch.fx.Node) -> str:
        """The module path a node belongs to: the module it calls, else the innermost module whose forward ran it."""
        if node.op == "call_module":
            return str(node.target)
        stack = node.meta.get("nn_module_stack") or {}
        if not stack:
            return ""
        path = list(stack.values())[-1][0]
        return path if path in self.modules else list(stack)[-1]

    @staticmethod
    def location(node: torch.fx.Node) -> str | None:
        loc = source_location(node)
        return loc["location"] if loc else None

    @staticmethod
    def is_tensor(value: Any) -> bool:
        return isinstance(value, torch.fx.Node) and isinstance(value.meta.get("tensor_meta"), _tensor_meta_type())

    def calls(self, path: str) -> int:
        return self.stats[path].calls if path in self.stats else 0

    def op_name(self, node: torch.fx.Node) -> str:
        """``conv2d``, ``relu``, ``add``, ``BatchNorm2d`` (module nodes: the module's class)."""
        if node.op == "call_module":
            m = self.modules.get(node.target)
            return type(m).__name__ if m is not None else str(node.target)
        if node.op == "call_method":
            return str(node.target)
        if node.op == "call_function":
            return getattr(node.target, "__name__", str(node.target)).lstrip("_")
        return node.op


def _tensor_meta_type():
    from torch.fx.passes.shape_prop import TensorMetadata

    return TensorMetadata


def _trace(module: nn.Module, example: list) -> tuple[torch.fx.GraphModule | None, str | None]:
    """Symbolic trace with stack traces recorded, then shapes propagated on the example inputs."""
    from torch.fx.passes.shape_prop import ShapeProp

    from mobilize.passes.bn_fold import FoldTracer

    tracer = FoldTracer()  # keeps Conv/BN subclasses that compute as their torch.nn base as modules, as fuse does
    tracer.record_stack_traces = True
    with third_party_failure("lint: FX tracing") as failed:  # the model's own Python (data-dependent branches ...)
        graph = tracer.trace(module)
        gm = torch.fx.GraphModule(tracer.root, graph)
    if failed:
        return None, failed.reason[:160]
    with third_party_failure("lint: shape propagation on fake tensors") as failed, torch.no_grad():
        ShapeProp(gm, fake_mode=_fake_mode()).propagate(*example)
    if not failed:
        return gm, None
    with third_party_failure("lint: shape propagation") as failed, torch.no_grad():  # not runnable on fake tensors
        ShapeProp(gm).propagate(*example)
    if failed:  # the traced graph does not run as the module did: use the graph without shapes
        return gm, f"shape propagation failed: {failed.reason[:120]}"
    return gm, None

