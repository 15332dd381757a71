""""Why is int8 not faster": per-operator profiles of an int8 model and its fp32 twin (ONNX Runtime, ExecuTorch).

Both files run under ONNX Runtime's profiler (the onnxruntime backend's, as ``bench --profile``) on the same
input, one thread; the profile's node events are summed per op type.  The diagnosis names the op
types that take more time in int8 than in fp32, counts the QuantizeLinear/DequantizeLinear nodes
left *unfused* in the optimized graph (each is a float<->int8 conversion run on every call), and
says whether this CPU has the instructions fast int8 kernels need (VNNI on x86, dot-product on
arm64; :func:`mobilize.core.target.host_cpu`).

Which analysis answers is the route's :class:`~mobilize.core.tune_route.WhySlow` (by the files' suffixes when
none is given).  For two ExecuTorch files (``.pte``/``.bpte``, ``WhySlow.DELEGATE``) the same question is
answered from their ETDump profiles (:mod:`mobilize.backends.executorch.profiler`): op kinds that take
longer in int8, ops that run *outside* the delegate in int8 but not in fp32 (they fell out of it), unfused
quantize/dequantize (``quantize_per_tensor`` kernels outside the delegate; XNNPACK's own ``Convert`` operators
inside it, from its profiler), layout conversions (``_to_dim_order_copy``, ``permute_copy``; XNNPACK
``Transpose``/``Copy``), the share of time outside the delegate in each, and the same CPU check.
"""

from __future__ import annotations

import collections
import dataclasses
import tempfile
from pathlib import Path
from typing import Any, Sequence

from mobilize.core.tune_route import WhySlow

PROFILE_RUNS = 50
CONVERSIONS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Transpose", "ReorderInput",
               "ReorderOutput")
"""Op types that only convert precision or layout: time spent there is overhead int8 added."""
PTE_QDQ = ("quantized_decomposed.quantize_per_tensor", "quantized_decomposed.dequantize_per_tensor",
           "quantized_decomposed.quantize_per_channel", "quantized_decomposed.dequantize_per_channel",
           "quantized_decomposed.quantize_per_token", "quantized_decomposed.dequantize_per_token",
           "quantized_decomposed.choose_qparams", "quantized_decomposed.choose_qparams_per_token_asymmetric")
"""ExecuTorch kernels that convert float<->int8 outside the delegate (each runs on every call)."""
PTE_LAYOUT = ("dim_order_ops._to_dim_order_copy", "dim_order_ops._clone_dim_order", "aten._to_dim_order_copy",
              "aten.permute_copy", "aten._to_copy", "aten.clone")
"""ExecuTorch kernels that only move data between layouts or dtypes."""
XNNPACK_PRECISION = ("Convert",)
"""XNNPACK operators (first word of their name) that convert float<->int8: quantize/dequantize left unfused
inside the delegate, around ops that stay float."""
XNNPACK_LAYOUT = ("Transpose", "Copy")
"""XNNPACK operators that only move data between layouts."""


def base_op(op: str) -> str:
    """The float op an optimized kernel stands for: QLinearConv, FusedConv -> Conv; QGemm -> Gemm."""
    if op.startswith("QLinear"):
        return op[len("QLinear"):]
    if op in ("QGemm", "FusedGemm"):
        return "Gemm"
    if op in ("FusedConv", "NhwcFusedConv"):
        return "Conv"
    return op


@dataclasses.dataclass
class Diagnosis:
    fp32_us: dict[str, float]
    """Op type -> mean microseconds per run."""
    int8_us: dict[str, float]
    unfused_qdq: int
    """QuantizeLinear + DequantizeLinear nodes still present after ONNX Runtime's graph optimizations."""
    unfused_examples: list[str]
    cpu: str
    int8_instructions: bool
    runs: int
    runtime: str
    """The runtime whose profiler recorded both files."""
    fell_out: dict[str, int] = dataclasses.field(default_factory=dict)
    """ExecuTorch: op kind -> instances outside the delegate in int8 beyond those outside it in fp32."""
    layout_ops: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    """ExecuTorch: layout/dtype conversion op kind -> (instances in fp32, in int8), where int8 has more."""
    fp32_profile: Any = None
    """ExecuTorch: the fp32 file's :class:`~mobilize.profile.core.TimeProfile`."""
    int8_profile: Any = None
    reason: str | None = None
    """Why no per-op answer could be given (a profile the runtime could not record); None when it was."""
    analysis: WhySlow = WhySlow.OPERATORS
    """Which analysis made it: operator times (below) or the delegate split (``fell_out``, ``layout_ops``, profiles)."""

    @property
    def slower_ops(self) -> list[tuple[str, float, float]]:
        """(op, fp32 us, int8 us) of ops costing more in int8 (kernels grouped by the float op they compute:
        QLinearConv with Conv), most extra time first."""
        fp32, int8 = _grouped(self.fp32_us), _grouped(self.int8_us)
        rows = [(op, fp32.get(op, 0.0), int8.get(op, 0.0)) for op in set(fp32) | set(int8)]
        return sorted([r for r in rows if r[2] > r[1]], key=lambda r: r[1] - r[2])

    def lines(self) -> list[str]:
        if self.analysis is WhySlow.DELEGATE:
            out = self._pte_lines()
        else:
            f, q = sum(self.fp32_us.values()) / 1e3, sum(self.int8_us.values()) / 1e3
            out = [f"why is int8 not faster: int8 {q:.3f} ms vs fp32 {f:.3f} ms per run in operators "
                   f"(ONNX Runtime profile, 1 thread, {self.runs} runs; the profiler's per-node cost included)"]
            for op, a, b in self.slower_ops[:6]:
                what = " (precision/layout conversion)" if op in CONVERSIONS else ""
                out.append(f"  {op}{what}: {a / 1e3:.3f} ms fp32 -> {b / 1e3:.3f} ms int8")
            if self.unfused_qdq:
                out.append(f"  {self.unfused_qdq} QuantizeLinear/DequantizeLinear node(s) left unfused after graph "
                           f"optimization (each converts float<->int8 on every run), e.g. "
                           f"{', '.join(self.unfused_examples[:3])}")
        out.append(f"  CPU: {self.cpu} — " + ("has int8 dot-product instructions (VNNI / SDOT)" if self.int8_instructions
                                              else "NO VNNI/dot-product instructions: int8 kernels widen to 16 bits and "
                                                   "gain little over fp32 FMA"))
        return out

    def _pte_lines(self) -> list[str]:
        fp, q = self.fp32_profile, self.int8_profile
        if self.reason:
            return [f"why is int8 not faster: no per-op answer: {self.reason}"]
        out = [f"why is int8 not faster: int8 {q.total_us / 1e3:.3f} ms vs fp32 {fp.total_us / 1e3:.3f} ms per run "
               f"(ExecuTorch ETDump, {q.threads} thread(s), median of {self.runs} runs)"]
        for name, p in (("fp32", fp), ("int8", q)):
            if p.delegate:
                out.append(f"  {name}: {p.outside_percent:.0f}% of the time outside {p.delegate} "
                           f"({p.outside_us / 1e3:.3f} ms in {sum(1 for o in p.ops if not o.inside)} op(s))")
        for op, a, b in self.slower_ops[:6]:
            what = " (precision/layout conversion)" if is_pte_conversion(op) else ""
            out.append(f"  {op}{what}: {a / 1e3:.3f} ms fp32 -> {b / 1e3:.3f} ms int8")
        if self.fell_out:
            out.append("  fell out of the delegate in int8 (run outside it, not in fp32): "
                       + ", ".join(f"{op} x{n}" for op, n in sorted(self.fell_out.items(), key=lambda kv: -kv[1])))
        if self.layout_ops:
            out.append("  more layout/dtype conversions in int8: "
                       + ", ".join(f"{op} {a} -> {b}" for op, (a, b) in self.layout_ops.items()))
        if q.warning():
            out.append(f"  int8 {q.warning()}")
        if self.unfused_qdq:
            out.append(f"  {self.unfused_qdq} unfused quantize/dequantize op(s) (kernels outside the delegate, "
                       f"Convert inside it; each converts float<->int8 on every run: at the float inputs and outputs, or "
                       f"around ops that stay float), "
                       f"e.g. {', '.join(self.unfused_examples[:3])}")
        return out

    def to_json(self) -> dict[str, Any]:
        data = {"runtime": self.runtime, "reason": self.reason, "fp32_us_by_op": self.fp32_us, "int8_us_by_op": self.int8_us,
                "slower_ops": [{"op": o, "fp32_us": a, "int8_us": b} for o, a, b in self.slower_ops],
                "unfused_qdq": self.unfused_qdq, "unfused_examples": self.unfused_examples[:10], "cpu": self.cpu,
                "int8_instructions": self.int8_instructions, "runs": self.runs}
        if self.analysis is WhySlow.DELEGATE:
            data.update(fell_out=self.fell_out, layout_ops={k: list(v) for k, v in self.layout_ops.items()},
                        fp32_profile=self.fp32_profile.to_json(), int8_profile=self.int8_profile.to_json())
        return data


def _grouped(us: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for op, t in us.items():
        out[base_op(op)] += t
    return dict(out)


def _delegate_word(op: str) -> str | None:
    """``Convert`` for ``XNNPACK Convert`` (a delegate op's short name), None for a kernel op."""
    head, _, rest = op.partition(" ")
    return rest.split(" ")[0] if head.isupper() and rest else None


def is_pte_precision_conversion(op: str) -> bool:
    """A quantize/dequantize kernel outside the delegate, or XNNPACK's ``Convert`` inside it."""
    return op in PTE_QDQ or _delegate_word(op) in XNNPACK_PRECISION


def is_pte_conversion(op: str) -> bool:
    """An ExecuTorch op kind (or ``XNNPACK Convert``-style delegate op) that only converts precision or layout."""
    return is_pte_precision_conversion(op) or op in PTE_LAYOUT or _delegate_word(op) in XNNPACK_LAYOUT


def op_profile(path: Path, inputs: Sequence[Any], runs: int = PROFILE_RUNS) -> tuple[dict[str, float], Any, str]:
    """Microseconds per run by op type (each node's median run, summed), the optimized graph (an ONNX ModelProto)
    and the runtime that profiled it.

    The profiler adds a fixed cost per node, so these sums exceed a plain run's latency on small
    models; compare them between the two files, not with benchmark latencies."""
    import onnx

    from mobilize.backends import profiler_for

    with tempfile.TemporaryDirectory(prefix="mobilize-prof-") as tmp:
        optimized_path = Path(tmp) / "optimized.onnx"
        profile = profiler_for("onnx")(Path(path), inputs, 1, runs, 3, optimized_path=optimized_path)
        optimized = onnx.load(str(optimized_path))
    per_op: dict[str, float] = collections.defaultdict(float)
    for op in profile.ops:  # each node's median run, summed by op type: warm-up and first-run packing excluded
        per_op[op.op] += op.time_us
    return dict(per_op), optimized, profile.runtime


def why_not_faster(fp32: Path, int8: Path, inputs: Sequence[Any], runs: int = PROFILE_RUNS,
                   analysis: WhySlow | None = None) -> Diagnosis:
    """Where an int8 file's time goes against its fp32 twin: two ONNX files (ONNX Runtime profiler,
    ``WhySlow.OPERATORS``) or two ExecuTorch files (ETDump, ``WhySlow.DELEGATE``); ``analysis`` None: by the
    files' suffixes."""
    from mobilize.core.target import host_cpu

    if analysis is None:
        pte = Path(fp32).suffix.lower() in PTE_SUFFIXES and Path(int8).suffix.lower() in PTE_SUFFIXES
        analysis = WhySlow.DELEGATE if pte else WhySlow.OPERATORS
    if analysis is WhySlow.DELEGATE:
        return why_not_faster_pte(Path(fp32), Path(int8), inputs, runs)
    fp32_us, _, runtime = op_profile(fp32, inputs, runs)
    int8_us, optimized, _ = op_profile(int8, inputs, runs)
    qdq = [n.name or n.op_type for n in optimized.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    cpu = host_cpu()
    dot = cpu.has_vnni or "asimddp" in cpu.flags
    return Diagnosis(dict(fp32_us), dict(int8_us), len(qdq), qdq, cpu.describe(), dot, runs, runtime)


PTE_SUFFIXES = (".pte", ".bpte")


def pte_op_times(profile: Any) -> dict[str, float]:
    """Op kind -> microseconds per run of an ExecuTorch profile.  When the delegate timed its own ops, they
    replace the opaque delegate call (``XNNPACK Convolution``: XNNPACK's name up to its first parenthesis, so
    the F32 and QS8 kernels of one op group together), and the rest of the call is ``XNNPACK (between its ops)``."""
    out: dict[str, float] = collections.defaultdict(float)
    inner: dict[str, float] = collections.defaultdict(float)
    for o in profile.delegate_ops:
        inner[o.node] += o.time_us
        out[_short(profile.delegate, o.op)] += o.time_us
    for o in profile.ops:
        if o.inside and o.node in inner:
            rest = o.time_us - inner[o.node]
            if rest > 0:
                out[f"{o.where} (between its ops)"] += rest
        else:
            out[o.op] += o.time_us
    return dict(out)


def _short(delegate: str, op: str) -> str:
    """``XNNPACK Convolution`` for XNNPACK's ``Convolution (NHWC, F32) IGEMM #2``."""
    from mobilize.profile.core import instance_free

    return f"{delegate} {instance_free(op).split(' (')[0].strip()}"


def _kinds(profile: Any) -> collections.Counter:
    """Op kind -> instances, delegate-internal ops included (by their short name)."""
    kinds = collections.Counter(o.op for o in profile.ops)
    kinds.update(_short(profile.delegate, o.op) for o in profile.delegate_ops)
    return kinds


def why_not_faster_pte(fp32: Path, int8: Path, inputs: Sequence[Any], runs: int = PROFILE_RUNS,
                       threads: int = 1) -> Diagnosis:
    """The ExecuTorch half of :func:`why_not_faster`: both files profiled with ETDump on the same input."""
    from mobilize.backends import profiler_for
    from mobilize.core.backend import format_for_suffix

    profile = profiler_for(format_for_suffix(Path(fp32).suffix))
    return diagnose_pte(profile(fp32, inputs, threads, runs), profile(int8, inputs, threads, runs))


def diagnose_pte(fp: Any, q: Any) -> Diagnosis:
    """Compare two ExecuTorch :class:`~mobilize.profile.core.TimeProfile` s (fp32, int8) of one model."""
    from mobilize.core.target import host_cpu

    cpu = host_cpu()
    dot = cpu.has_vnni or "asimddp" in cpu.flags
    missing = [f"{p.path}: {p.reason}" for p in (fp, q) if not p.available]
    if missing:
        return Diagnosis({}, {}, 0, [], cpu.describe(), dot, 0, q.runtime, fp32_profile=fp, int8_profile=q,
                         reason="; ".join(missing), analysis=WhySlow.DELEGATE)
    outside = lambda p: collections.Counter(o.op for o in p.ops if not o.inside)  # noqa: E731
    before, after = outside(fp), outside(q)
    fell_out = {op: n - before.get(op, 0) for op, n in after.items()
                if n > before.get(op, 0) and not is_pte_conversion(op)}
    fp_kinds, q_kinds = _kinds(fp), _kinds(q)
    layout = {op: (fp_kinds.get(op, 0), n) for op, n in q_kinds.items()
              if is_pte_conversion(op) and not is_pte_precision_conversion(op) and n > fp_kinds.get(op, 0)}
    qdq = [f"{o.op} ({o.node})" for o in q.ops if not o.inside and o.op in PTE_QDQ]
    qdq += [f"{q.delegate} {o.op} ({o.node})" for o in q.delegate_ops
            if is_pte_precision_conversion(_short(q.delegate, o.op))]
    return Diagnosis(pte_op_times(fp), pte_op_times(q), len(qdq), qdq, cpu.describe(), dot, q.runs,
                     q.runtime, fell_out=fell_out, layout_ops=layout, fp32_profile=fp, int8_profile=q,
                     analysis=WhySlow.DELEGATE)
