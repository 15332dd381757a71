""""Why is int8 not faster": ONNX Runtime per-operator profiles of an int8 model and its fp32 twin.

Both files run under ONNX Runtime's profiler (``SessionOptions.enable_profiling``) on the same
input, one thread; the profile's node events are summed per op type.  The diagnosis names the op
types that take more time in int8 than in fp32, counts the QuantizeLinear/DequantizeLinear nodes
left *unfused* in the optimized graph (each is a float<->int8 conversion run on every call), and
says whether this CPU has the instructions fast int8 kernels need (VNNI on x86, dot-product on
arm64; :func:`mobilize.target.host_cpu`).

    >>> d = why_not_faster(Path("fp32.onnx"), Path("int8.onnx"), [torch.randn(1, 3, 8, 8)])
    >>> d.slower_ops[0]          # (op, fp32 us, int8 us); QLinearConv is grouped with Conv
    ('Add', 59.0, 660.0)
    >>> d.unfused_qdq, d.int8_instructions
    (4, True)
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any, Sequence

PROFILE_RUNS = 50
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

    @property
    def slower_ops(self) -> list[tuple[str, float, float]]:
        """(op, fp32 us, int8 us) of ops costing more in int8 (kernels grouped by the float op they compute:
        QLinearConv with Conv), most extra time first."""
        fp32, int8 = _grouped(self.fp32_us), _grouped(self.int8_us)
        rows = [(op, fp32.get(op, 0.0), int8.get(op, 0.0)) for op in set(fp32) | set(int8)]
        return sorted([r for r in rows if r[2] > r[1]], key=lambda r: r[1] - r[2])

    def lines(self) -> list[str]:
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

    def to_json(self) -> dict[str, Any]:
        return {"fp32_us_by_op": self.fp32_us, "int8_us_by_op": self.int8_us,
                "slower_ops": [{"op": o, "fp32_us": a, "int8_us": b} for o, a, b in self.slower_ops],
                "unfused_qdq": self.unfused_qdq, "unfused_examples": self.unfused_examples[:10], "cpu": self.cpu,
                "int8_instructions": self.int8_instructions, "runs": self.runs}


def _grouped(us: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for op, t in us.items():
        out[base_op(op)] += t
    return dict(out)


def op_profile(path: Path, inputs: Sequence[Any], runs: int = PROFILE_RUNS) -> tuple[dict[str, float], Any]:
    """Microseconds per run by op type (each node's median run, summed), and the optimized graph (an ONNX ModelProto).

    The profiler adds a fixed cost per node, so these sums exceed a plain run's latency on small
    models; compare them between the two files, not with benchmark latencies."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="mobilize-prof-") as tmp:
        opts = ort.SessionOptions()
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "prof")
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        opts.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        feed = {i.name: np.asarray(getattr(x, "numpy", lambda: x)(), dtype=np.float32)
                for i, x in zip(session.get_inputs(), inputs)}
        for _ in range(3):
            session.run(None, feed)
        for _ in range(runs):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
        optimized = onnx.load(opts.optimized_model_filepath)
    per_node: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and "op_name" in args:
            per_node[(e["name"], args["op_name"])].append(float(e.get("dur", 0)))
    per_op: dict[str, float] = collections.defaultdict(float)
    for (_, op), durations in per_node.items():  # the median run of each node: warm-up and first-run packing excluded
        per_op[op] += statistics.median(durations)
    return dict(per_op), optimized


def why_not_faster(fp32: Path, int8: Path, inputs: Sequence[Any], runs: int = PROFILE_RUNS) -> Diagnosis:
    from mobilize.target import host_cpu

    fp32_us, _ = op_profile(fp32, inputs, runs)
    int8_us, optimized = op_profile(int8, inputs, runs)
    qdq = [n.name or n.op_type for n in optimized.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    cpu = host_cpu()
    dot = cpu.has_vnni or "asimddp" in cpu.flags
    return Diagnosis(dict(fp32_us), dict(int8_us), len(qdq), qdq, cpu.describe(), dot, runs)
