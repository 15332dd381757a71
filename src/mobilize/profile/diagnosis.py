""""Why is int8 not faster": the one answer type every engine's analysis gives (``Backend.why_slow``), and the
parts of it that are the same for every engine - the ops that cost more in int8, the delegate's share of each
file's time, the CPU's int8 instructions.

An engine's analysis (``backends/<engine>/why_slow.py``) profiles an int8 file and its fp32 twin its own way and
fills a :class:`Diagnosis`: per-op times, the conversions it left unfused, which of its op kinds only convert
precision or layout, and its own lines (what fell out of its delegate).  tune prints :meth:`Diagnosis.lines` and
writes :meth:`Diagnosis.to_json` into its report.

    >>> d = Diagnosis({"Conv": 100.0}, {"QLinearConv": 80.0, "QuantizeLinear": 30.0}, 1, ["q0"], "demo CPU", True,
    ...               5, "demo", headline="why is int8 not faster: 0.110 ms vs 0.100 ms",
    ...               conversions=frozenset({"QuantizeLinear"}), groups={"QLinearConv": "Conv"})
    >>> d.slower_ops
    [('QuantizeLinear', 0.0, 30.0)]
    >>> d.lines()[1]
    '  QuantizeLinear (precision/layout conversion): 0.000 ms fp32 -> 0.030 ms int8'
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Mapping


@dataclasses.dataclass
class Diagnosis:
    """Where an int8 file's time goes against its fp32 twin, as one engine's analysis found it."""

    fp32_us: dict[str, float]
    """Op kind -> microseconds per run, as the engine's profiler names it."""
    int8_us: dict[str, float]
    unfused_qdq: int
    """Quantize/dequantize conversions the engine left in the int8 file (each runs on every call)."""
    unfused_examples: list[str]
    cpu: str
    int8_instructions: bool
    runs: int
    runtime: str
    """The runtime whose profiler recorded both files."""
    headline: str = ""
    """The first line: both files' time per run and how it was measured (the engine's words)."""
    notes: list[str] = dataclasses.field(default_factory=list)
    """The engine's own findings, one line each (ops that fell out of its delegate, unfused conversions)."""
    conversions: frozenset[str] = frozenset()
    """Op kinds that only convert precision or layout (flagged in the slower-ops lines)."""
    groups: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Op kind -> the float op it computes (``QLinearConv`` -> ``Conv``), so an int8 kernel is compared with its
    float twin; kinds not listed stand for themselves."""
    fell_out: dict[str, int] = dataclasses.field(default_factory=dict)
    """Op kind -> instances outside the delegate in int8 beyond those outside it in fp32."""
    layout_ops: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    """Layout/dtype conversion op kind -> (instances in fp32, in int8), where int8 has more."""
    fp32_profile: Any = None
    """The fp32 file's :class:`~mobilize.profile.core.TimeProfile` when the analysis took one (a delegate split)."""
    int8_profile: Any = None
    reason: str | None = None
    """Why no per-op answer could be given (a profile the runtime could not record); None when it was."""

    @property
    def slower_ops(self) -> list[tuple[str, float, float]]:
        """(op, fp32 us, int8 us) of ops costing more in int8 (kernels grouped by the float op they compute),
        most extra time first."""
        fp32, int8 = self._grouped(self.fp32_us), self._grouped(self.int8_us)
        rows = [(op, fp32.get(op, 0.0), int8.get(op, 0.0)) for op in set(fp32) | set(int8)]
        return sorted([r for r in rows if r[2] > r[1]], key=lambda r: r[1] - r[2])

    def _grouped(self, us: dict[str, float]) -> dict[str, float]:
        out: dict[str, float] = collections.defaultdict(float)
        for op, t in us.items():
            out[self.groups.get(op, op)] += t
        return dict(out)

    def lines(self) -> list[str]:
        if self.reason:
            return [f"why is int8 not faster: no per-op answer: {self.reason}",
                    cpu_line(self.cpu, self.int8_instructions)]
        out = [self.headline]
        for name, p in (("fp32", self.fp32_profile), ("int8", self.int8_profile)):
            if p is not None and p.delegate:
                out.append(f"  {name}: {p.outside_percent:.0f}% of the time outside {p.delegate} "
                           f"({p.outside_us / 1e3:.3f} ms in {sum(1 for o in p.ops if not o.inside)} op(s))")
        for op, a, b in self.slower_ops[:6]:
            what = " (precision/layout conversion)" if op in self.conversions else ""
            out.append(f"  {op}{what}: {a / 1e3:.3f} ms fp32 -> {b / 1e3:.3f} ms int8")
        return out + self.notes + [cpu_line(self.cpu, self.int8_instructions)]

    def to_json(self) -> dict[str, Any]:
        data = {"runtime": self.runtime, "reason": self.reason, "fp32_us_by_op": self.fp32_us,
                "int8_us_by_op": self.int8_us,
                "slower_ops": [{"op": o, "fp32_us": a, "int8_us": b} for o, a, b in self.slower_ops],
                "unfused_qdq": self.unfused_qdq, "unfused_examples": self.unfused_examples[:10], "cpu": self.cpu,
                "int8_instructions": self.int8_instructions, "runs": self.runs}
        if self.fp32_profile is not None:
            data.update(fell_out=self.fell_out, layout_ops={k: list(v) for k, v in self.layout_ops.items()},
                        fp32_profile=self.fp32_profile.to_json(), int8_profile=self.int8_profile.to_json())
        return data


def cpu_line(cpu: str, int8_instructions: bool) -> str:
    return f"  CPU: {cpu} — " + ("has int8 dot-product instructions (VNNI / SDOT)" if int8_instructions
                                else "NO VNNI/dot-product instructions: int8 kernels widen to 16 bits and gain "
                                     "little over fp32 FMA")


def host_int8() -> tuple[str, bool]:
    """This CPU in words, and whether it has the instructions fast int8 kernels need (VNNI on x86, dot-product on
    arm64)."""
    from mobilize.core.target import host_cpu

    cpu = host_cpu()
    return cpu.describe(), bool(cpu.has_vnni or "asimddp" in cpu.flags)
