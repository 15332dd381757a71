""""Why is int8 not faster" for two ONNX files (``Backend.why_slow``): both run under ONNX Runtime's profiler (this
engine's, as ``bench --profile``) on the same input, one thread; the node events are summed per op type.  The
diagnosis names the op types that take more time in int8 than in fp32 (``QLinearConv`` counted with ``Conv``),
counts the QuantizeLinear/DequantizeLinear nodes left *unfused* in the optimized graph (each is a float<->int8
conversion run on every call), and says whether this CPU has the instructions fast int8 kernels need.

    >>> base_op("QLinearConv"), base_op("FusedGemm"), base_op("Relu")
    ('Conv', 'Gemm', 'Relu')
"""

from __future__ import annotations

import collections
import tempfile
from pathlib import Path
from typing import Any, Sequence

from mobilize.profile.diagnosis import Diagnosis, host_int8

CONVERSIONS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Transpose", "ReorderInput",
               "ReorderOutput")
"""Op types that only convert precision or layout: time spent there is overhead int8 added."""


def base_op(op: str) -> str:
    """The float op an optimized kernel stands for: QLinearConv, FusedConv -> Conv; QGemm -> Gemm."""
    if op.startswith("QLinear"):
        return op[len("QLinear"):]
    if op in ("QGemm", "FusedGemm"):
        return "Gemm"
    if op in ("FusedConv", "NhwcFusedConv"):
        return "Conv"
    return op


def op_profile(path: Path, inputs: Sequence[Any], runs: int) -> tuple[dict[str, float], Any, str]:
    """Microseconds per run by op type (each node's median run, summed), the optimized graph (an ONNX ModelProto)
    and the runtime that profiled it.

    The profiler adds a fixed cost per node, so these sums exceed a plain run's latency on small
    models; compare them between the two files, not with benchmark latencies."""
    import onnx

    from mobilize.backends.onnxruntime.profiler import profile_onnx

    with tempfile.TemporaryDirectory(prefix="mobilize-prof-") as tmp:
        optimized_path = Path(tmp) / "optimized.onnx"
        profile = profile_onnx(Path(path), inputs, 1, runs, 3, optimized_path=optimized_path)
        optimized = onnx.load(str(optimized_path))
    per_op: dict[str, float] = collections.defaultdict(float)
    for op in profile.ops:  # each node's median run, summed by op type: warm-up and first-run packing excluded
        per_op[op.op] += op.time_us
    return dict(per_op), optimized, profile.runtime


def why_not_faster(fp32: Path, int8: Path, inputs: Sequence[Any], runs: int) -> Diagnosis:
    """Where the int8 ONNX file's time goes against its fp32 twin, per op type under ONNX Runtime's profiler."""
    fp32_us, _, runtime = op_profile(fp32, inputs, runs)
    int8_us, optimized, _ = op_profile(int8, inputs, runs)
    qdq = [n.name or n.op_type for n in optimized.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    cpu, dot = host_int8()
    f, q = sum(fp32_us.values()) / 1e3, sum(int8_us.values()) / 1e3
    headline = (f"why is int8 not faster: int8 {q:.3f} ms vs fp32 {f:.3f} ms per run in operators "
                f"(ONNX Runtime profile, 1 thread, {runs} runs; the profiler's per-node cost included)")
    notes = [f"  {len(qdq)} QuantizeLinear/DequantizeLinear node(s) left unfused after graph optimization (each "
             f"converts float<->int8 on every run), e.g. {', '.join(qdq[:3])}"] if qdq else []
    groups = {op: base_op(op) for op in set(fp32_us) | set(int8_us) if base_op(op) != op}
    return Diagnosis(dict(fp32_us), dict(int8_us), len(qdq), qdq, cpu, dot, runs, runtime, headline=headline,
                     notes=notes, conversions=frozenset(CONVERSIONS), groups=groups)
