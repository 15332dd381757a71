"""ONNX Runtime: intra-op threads, graph optimization level, saving the optimized graph, IO binding.

``details()`` reports how many nodes each execution provider was assigned (ONNX Runtime's own
graph-assignment record), and it lands in the bench JSON.  With IO binding on, inputs are
bound once and outputs go to preallocated buffers reused on every run (no allocation per run).
Load failures become one-line user errors: a file that fails the ONNX checker names the node,
an opset newer than this onnxruntime says which opsets it supports.
"""

from __future__ import annotations

import contextlib
import dataclasses

import collections
import re
from pathlib import Path
from typing import Any, Sequence

from mobilize.backends.onnxruntime.messages import explain
from mobilize.backends.onnxruntime.sessions import ort_session, session_options
from mobilize.core.errors import ConfigError, UnsupportedModelError, third_party_failure, translate_errors
from mobilize.runtimes.base import Session, as_array, flatten_outputs
from mobilize.core.inputs import InputSpec

_ORT_TYPES = {
    "tensor(float)": "float", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(uint8)": "uint8",
    "tensor(int8)": "int8", "tensor(bool)": "bool",
}
_NUMPY_TYPES = {"float": "float32"}
_OPSET_TOO_NEW = re.compile(r"Opset (\d+) is under development.*?support for domain (\S+) is till opset (\d+)", re.S)
_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")
_CPP_LOCATION = re.compile(r"^\S+\.(?:cc|h|cpp):\d+ .*?\)\s+")


@dataclasses.dataclass(frozen=True)
class OnnxRuntimeOptions:
    graph_optimization_level: str = "all"
    """disable, basic, extended, layout or all."""
    optimized_model_path: str | None = None
    """Where to save the optimized graph."""
    io_binding: bool = False
    """Bind inputs once and write outputs into preallocated buffers."""


class OnnxRuntimeSession(Session):
    name = "onnxruntime"
    Options = OnnxRuntimeOptions
    formats = ("onnx",)
    packages = ("onnxruntime",)
    needs_torch = False

    def _load(self) -> None:
        self.io_binding = self.own.io_binding
        self._last_feed: dict | None = None
        self._source: str | bytes = str(self.target.path)
        """The file, or the opset-upgraded model in memory when ONNX Runtime has no kernels for its old ops."""
        self._make_session(self.options.threads)

    def _make_session(self, threads: int | None) -> None:
        opts = session_options(threads, level=self.own.graph_optimization_level,
                               optimized_path=self.own.optimized_model_path,
                               config={"session.record_ep_graph_assignment_info": "1"})
        with third_party_failure("ONNX Runtime session") as failed:  # Fail, InvalidGraph, InvalidProtobuf ...
            self.session = ort_session(self._source, opts)
        if failed:
            exc, path = failed.error, Path(self.target.path)
            if isinstance(self._source, bytes) or not _NO_KERNEL.search(str(exc)) or path.suffix.lower() == ".ort":
                raise UnsupportedModelError(describe_load_error(path, exc)) from exc
            import onnx

            upgraded, note = upgrade_opset(onnx.load(str(path)), str(exc), str(path))
            self._source = upgraded.SerializeToString()
            self.notes.append(f"onnxruntime: {note}")
            return self._make_session(threads)
        self.threads = threads
        self._names = [i.name for i in self.session.get_inputs()]

    # -- inputs ---------------------------------------------------------------------------
    def declared_input_specs(self) -> list[InputSpec]:
        specs = []
        for inp in self.session.get_inputs():
            shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in inp.shape)  # 0: an empty state, not unknown
            specs.append(InputSpec(shape, _ORT_TYPES.get(inp.type, "float")))
        return specs

    def declared_input_names(self) -> list[str]:
        return list(self._names)

    def example_inputs(self, seed: int = 0) -> list:
        declared = self.declared_input_specs()
        if any(d < 0 for s in declared for d in s.shape):
            dynamic = [f"{i.name} {list(i.shape)}" for i, s in zip(self.session.get_inputs(), declared)
                       if any(d < 0 for d in s.shape)]  # the others are known: listed, they read as dynamic too
            raise ConfigError(
                f"{self.target.path} has inputs with dynamic dimensions: {'; '.join(dynamic)}",
                hint='give --input_dims, e.g. --input_dims "1,3,224,224"',
            )
        return super().example_inputs(seed)

    # -- running --------------------------------------------------------------------------
    def use_io_binding(self, enabled: bool = True) -> None:
        """Bind inputs once and write outputs into buffers allocated once (applies to the next prepare)."""
        self.io_binding = enabled

    def prepare(self, inputs: Sequence[Any]) -> Any:

        feed = {}
        for name, t in zip(self._names, inputs):
            feed[name] = as_array(t)
        self._last_feed = feed
        return self._bind(feed) if self.io_binding else feed

    def run_prepared(self, native: Any) -> Any:
        try:
            if type(native) is _Bound:
                self.session.run_with_iobinding(native.binding)
                return native.outputs
            return self.session.run(None, native)
        except _ort_errors() as exc:  # ONNX Runtime's C++ status text, as a sentence (the raw text: its cause)
            raise run_failure(exc) from exc

    def outputs_to_torch(self, raw: Any) -> list:
        if self.io_binding:  # the buffers are reused by the next run: hand out copies
            raw = [a.copy() for a in raw]
        return flatten_outputs(raw)

    def _bind(self, feed: dict) -> "_Bound":
        import numpy as np

        metas = self.session.get_outputs()
        if all(all(isinstance(d, int) and d > 0 for d in m.shape) for m in metas):
            outputs = [np.empty(m.shape, dtype=_numpy_dtype(m.type)) for m in metas]
        else:  # dynamic output shapes: learn them from one run on these inputs
            outputs = [np.empty_like(a) for a in self.session.run(None, feed)]
        binding = self.session.io_binding()
        for name, arr in feed.items():
            binding.bind_cpu_input(name, arr)
        for meta, buf in zip(metas, outputs):
            binding.bind_output(meta.name, "cpu", 0, buf.dtype, list(buf.shape), buf.ctypes.data)
        return _Bound(binding, feed, outputs)

    def set_threads(self, threads: int) -> None:
        if threads != self.threads:
            self._make_session(threads)

    # -- report ---------------------------------------------------------------------------
    def details(self) -> dict[str, Any]:
        """Nodes per execution provider, as ONNX Runtime recorded the graph assignment (ORT-format files
        carry no record: there, from a profiled run on the last inputs)."""
        import onnxruntime as ort

        providers: collections.Counter = collections.Counter()
        for subgraph in self.session.get_provider_graph_assignment_info():
            providers[subgraph.ep_name] += len(subgraph.get_nodes())
        source = "graph assignment"
        if not providers:
            source = "profiled run" if self._last_feed is not None else "not recorded (ORT-format file, not run yet)"
            providers = self._profiled_providers(self._last_feed) if self._last_feed is not None else providers
        return {"providers": dict(providers), "providers_from": source, "onnxruntime_version": ort.__version__,
                "graph_optimization_level": self.own.graph_optimization_level, "io_binding": self.io_binding}

    def _profiled_providers(self, feed: dict) -> collections.Counter:
        import json
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mobilize-ort-profile-") as tmp:
            opts = session_options(self.threads, level=self.own.graph_optimization_level,
                                   profile_prefix=Path(tmp) / "profile")
            session = ort_session(self._source, opts)
            session.run(None, feed)
            events = json.loads(Path(session.end_profiling()).read_text())
        nodes = {(e["name"], e["args"].get("provider")) for e in events
                 if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")}
        return collections.Counter(provider for _, provider in nodes if provider)

    def close(self) -> None:
        self.session = None


class _Bound:
    """An IOBinding with its input arrays and preallocated output buffers (kept alive together)."""

    __slots__ = ("binding", "inputs", "outputs")

    def __init__(self, binding: Any, inputs: dict, outputs: list):
        self.binding, self.inputs, self.outputs = binding, inputs, outputs


def _numpy_dtype(ort_type: str) -> str:
    name = _ORT_TYPES.get(ort_type)
    if name is None:
        raise UnsupportedModelError(f"IO binding: output type {ort_type} is not supported",
                                    hint="run without IO binding")
    return _NUMPY_TYPES.get(name, name)


_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\((\d+)\)")
UPGRADE_OPSET = 17
"""Old models that ONNX Runtime has no kernels for are upgraded to this opset (the onnx reference evaluator is
also right there: its BatchNormalization 7-13 uses batch statistics when a momentum attribute is set)."""


def missing_kernel(model_bytes: bytes) -> str | None:
    """ONNX Runtime's "Could not find an implementation for Op(version)" for this model, or None if it loads."""
    with third_party_failure("ONNX Runtime session") as failed:
        ort_session(model_bytes, session_options(level="disable"))
    # only the missing-kernel failure is ours to fix; the caller reports the rest
    return str(failed.error) if failed and _NO_KERNEL.search(str(failed.error)) else None


def upgrade_opset(proto: Any, error: str, what: str, opset: int = UPGRADE_OPSET) -> tuple[Any, str]:
    """Upgrade an old model with onnx's version converter and check the result against the original with onnx's
    reference evaluator on the same seeded input; (upgraded model, note).  Raises UnsupportedModelError when the
    upgrade fails, cannot be checked, or changes the outputs."""
    import numpy as np
    import onnx
    from onnx import version_converter
    from onnx.reference import ReferenceEvaluator

    match = _NO_KERNEL.search(error)
    missing = f"{match.group(1)}({match.group(2)})" if match else "an old op"
    old = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    head = f"{what} uses {missing}, which ONNX Runtime no longer implements"
    hint = f"upgrade it yourself: onnx.version_converter.convert_version(model, {opset})"
    # the converter raises RuntimeError / ValidationError with the adapter that failed
    with translate_errors(UnsupportedModelError, f"upgrading opset {old} to {opset}", hint=hint, message=lambda exc: (
            f"{head}; upgrading opset {old} to {opset} failed: {_one_line(exc)}")):
        upgraded = version_converter.convert_version(proto, opset)
        onnx.checker.check_model(upgraded)
    feed = _seeded_feed(proto)
    # the evaluator lacks or mis-implements some old op: the upgrade stays unchecked
    with translate_errors(UnsupportedModelError, "checking the upgrade", hint=hint, message=lambda exc: (
            f"{head}; upgraded opset {old} to {opset}, but onnx's reference evaluator could not check it against "
            f"the original: {_one_line(exc)}")):
        want = ReferenceEvaluator(proto).run(None, feed)
        got = ReferenceEvaluator(upgraded).run(None, feed)
    err = max((float(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)).max()) for g, w in zip(got, want)
               if np.asarray(w).size), default=0.0)
    scale = max((float(np.abs(np.asarray(w, np.float64)).max()) for w in want if np.asarray(w).size), default=0.0)
    if len(got) != len(want) or not err <= 1e-4 * max(1.0, scale):
        raise UnsupportedModelError(f"{head}; the opset {opset} upgrade does not compute the same as the original in "
                                    f"onnx's reference evaluator (max abs difference {err:.3g}, outputs up to "
                                    f"{scale:.3g})", hint=hint)
    note = (f"{Path(what).name} uses {missing}, which ONNX Runtime no longer implements: upgraded opset {old} to "
            f"{opset} with onnx's version converter; onnx's reference evaluator gives the same outputs for both on a "
            f"seeded input (max abs difference {err:.2g})")
    return upgraded, note


def _seeded_feed(proto: Any) -> dict:
    """A seeded random input for every graph input (dynamic dims as 1)."""
    import numpy as np
    from onnx import helper

    weights = {t.name for t in proto.graph.initializer}
    rng = np.random.default_rng(0)
    feed = {}
    for inp in proto.graph.input:
        if inp.name in weights:
            continue
        tensor = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tensor.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        feed[inp.name] = (rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
                          else np.zeros(shape, dtype))
    return feed


def _one_line(exc: BaseException) -> str:
    text = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
    return text[:300]


def _ort_errors() -> tuple[type[BaseException], ...]:
    """The exception types ONNX Runtime's C++ side raises (Fail, InvalidArgument, RuntimeException, ...)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return tuple(t for t in vars(state).values() if isinstance(t, type) and issubclass(t, Exception)
                 and t.__module__ == state.__name__) or (RuntimeError,)


def run_failure(exc: BaseException) -> UnsupportedModelError:
    """ONNX Runtime's run failure as a one-line error that says what failed and what to do; its raw text goes to
    stderr as ONNX Runtime's own log lines do (a worker's log, ``logs/``; kept off the terminal as its noise)."""
    import os

    raw = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())
    with contextlib.suppress(OSError):
        os.write(2, f"[E:onnxruntime:mobilize] the run failed: {raw}\n".encode(errors="replace"))
    return UnsupportedModelError(explain(raw) or f"ONNX Runtime failed to run the file: {_one_line(exc)}")


def describe_load_error(path: Path, exc: BaseException) -> str:
    """One line saying why ONNX Runtime could not load ``path``: opset, checker failure, or its own words."""
    import onnxruntime as ort

    text = str(exc)
    head = f"ONNX Runtime could not load {path}"
    match = _OPSET_TOO_NEW.search(text)
    if match:
        used, domain, top = match.groups()
        return (f"{head}: it uses {domain} opset {used}, newer than onnxruntime {ort.__version__} supports "
                f"(up to opset {top}); re-export with opset <= {top} or upgrade onnxruntime")
    checker = _checker_failure(path)
    if checker:
        return f"{head}: it fails the ONNX checker: {checker}"
    said = explain(text)
    if said:
        return f"{head}: {said}"
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    first = _CPP_LOCATION.sub("", _ORT_PREFIX.sub("", lines[0])) if lines else type(exc).__name__
    return f"{head}: {first}"


def _checker_failure(path: Path) -> str | None:
    """The checker's complaint about a file that parses as ONNX, else None."""
    if path.suffix.lower() == ".ort":
        return None
    try:
        import onnx
    except ImportError:
        return None
    with third_party_failure(f"reading {path}") as failed:
        proto = onnx.load(str(path), load_external_data=False)
    if failed:  # not an ONNX protobuf (or ORT format): nothing the checker can add
        return None
    try:
        onnx.checker.check_model(proto)
    except (onnx.checker.ValidationError, ValueError) as exc:
        return " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())[:300]
    return None
