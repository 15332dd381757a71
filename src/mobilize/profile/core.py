"""A time-weighted profile: where one run's time goes, op by op, inside and outside the delegate.

The op-count report (:mod:`mobilize.backends.executorch.delegation`) says how many ops a delegate took; this
says how much of the *time* they take.  The two disagree exactly when it matters: a classifier
whose final large-window ``avg_pool2d`` fell back to ExecuTorch's portable kernels had 167 of 168
ops in XNNPACK ("99%", no warning) and ran 6x slower than eager PyTorch, because that one op took
most of the time.  :meth:`TimeProfile.warning` names such ops.

Thresholds (module constants, one place): a WARNING when at most :data:`FEW_OPS` op instances
outside the delegate together take more than :data:`FEW_OPS_PERCENT` of a run, or when everything
outside the delegate takes more than :data:`OUTSIDE_PERCENT`.  30% is where removing the op(s)
would make the file at least ~1.4x faster: beyond the 15% run-to-run noise of a shared machine.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any

WARN_BELOW_PERCENT = 50.0
"""By op count: a delegate that takes fewer than this share of a file's ops is flagged (ExecuTorch, LiteRT)."""
FEW_OPS = 3
"""At most this many op instances outside the delegate ..."""
FEW_OPS_PERCENT = 30.0
"""... taking more than this share of a run's time give a WARNING."""
OUTSIDE_PERCENT = 50.0
"""More than this share of a run's time outside the delegate, however many ops share it, gives a WARNING."""


@dataclasses.dataclass(frozen=True)
class OpTime:
    """One op instance (an ExecuTorch instruction, an ONNX Runtime node) and its time per run."""

    op: str
    """Op kind: ``aten.avg_pool2d``, ``Conv``; a delegate call is ``XNNPACK delegate call``."""
    node: str
    """Which instance: ``instruction 3`` (ExecuTorch), the node name (ONNX Runtime)."""
    where: str
    """Who ran it: the delegate's name (``XNNPACK``), ``portable`` (ExecuTorch's own kernels), or the ONNX
    Runtime execution provider."""
    inside: bool
    """True when it ran inside the delegate."""
    time_us: float
    """Median over the profiled runs of its time in one run (microseconds)."""

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "node": self.node, "where": self.where, "inside": self.inside,
                "time_us": round(self.time_us, 3)}


@dataclasses.dataclass
class TimeProfile:
    """Per-op times of one file on one runtime; ``available`` False (with ``reason``) when the runtime could not
    record them: then every figure is empty, never guessed."""

    path: str
    runtime: str
    """``executorch`` or ``onnxruntime``."""
    source: str
    """What recorded the times: ``ETDump`` or ``ONNX Runtime profiler``."""
    delegate: str | None
    """The delegate (``XNNPACK``) or the accelerated execution provider; None when the file has none (then
    there is no inside/outside split and no fallback warning)."""
    threads: int
    runs: int
    """Runs the medians are over (after warm-up)."""
    total_us: float = 0.0
    """Median time of one whole run as the tracer saw it (ExecuTorch ``Method::execute``, ONNX Runtime
    ``model_run``)."""
    ops: list[OpTime] = dataclasses.field(default_factory=list)
    delegate_ops: list[OpTime] = dataclasses.field(default_factory=list)
    """Ops timed inside a delegate call, when the delegate reports them (XNNPACK's own profiler); their time
    is part of the delegate call's, not added to it."""
    ops_in_delegate: int | None = None
    """Op count inside the delegate, from the delegation report (None when unknown)."""
    ops_total: int | None = None
    available: bool = True
    reason: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def inside_us(self) -> float:
        return sum(o.time_us for o in self.ops if o.inside)

    @property
    def outside_us(self) -> float:
        return sum(o.time_us for o in self.ops if not o.inside)

    @property
    def overhead_us(self) -> float:
        """The rest of a run: the runtime between ops (never negative; medians need not add up)."""
        return max(0.0, self.total_us - self.inside_us - self.outside_us)

    def percent(self, us: float) -> float:
        return 100.0 * us / self.total_us if self.total_us > 0 else 0.0

    @property
    def inside_percent(self) -> float | None:
        return self.percent(self.inside_us) if self.available and self.delegate else None

    @property
    def outside_percent(self) -> float | None:
        """Share of a run spent in ops outside the delegate (None without a delegate or without a profile)."""
        return self.percent(self.outside_us) if self.available and self.delegate else None

    def top_fallbacks(self, k: int = FEW_OPS) -> list[OpTime]:
        """The ``k`` slowest op instances outside the delegate, slowest first."""
        return sorted((o for o in self.ops if not o.inside), key=lambda o: -o.time_us)[:k]

    def by_op(self) -> list[tuple[str, str, int, float]]:
        """(op, where, instances, microseconds per run) per op kind, slowest first."""
        times: dict[tuple[str, str], float] = collections.defaultdict(float)
        calls: collections.Counter = collections.Counter()
        for o in self.ops:
            times[(o.op, o.where)] += o.time_us
            calls[(o.op, o.where)] += 1
        return sorted(((op, where, calls[(op, where)], t) for (op, where), t in times.items()), key=lambda r: -r[3])

    def warning(self) -> str | None:
        """A plain-words WARNING when a few ops outside the delegate dominate the time, or most of it is outside."""
        if not self.available or not self.delegate or self.total_us <= 0:
            return None
        few = self.top_fallbacks(FEW_OPS)
        few_pct = self.percent(sum(o.time_us for o in few))
        outside_pct = self.percent(self.outside_us)
        counted = ""
        if self.ops_in_delegate is not None and self.ops_total:
            by_count = 100.0 * self.ops_in_delegate / self.ops_total
            counted = (f"; by op count {self.delegate} runs {self.ops_in_delegate} of {self.ops_total} ({by_count:.0f}%)"
                       + (", so the op count alone does not show it" if by_count >= WARN_BELOW_PERCENT else ""))
        if few and few_pct > FEW_OPS_PERCENT:
            # the fewest of the slowest that already pass the threshold
            cum, named = 0.0, []
            for o in few:
                named.append(o)
                cum += o.time_us
                if self.percent(cum) > FEW_OPS_PERCENT:
                    break
            share = self.percent(cum)
            names = ", ".join(f"{o.op} {self.percent(o.time_us):.0f}% ({o.node})" for o in named)
            one = len(named) == 1
            from mobilize.core.backend import backend_for_runtime

            engine = backend_for_runtime(self.runtime)
            why = f"; {engine.delegate_hint}" if engine is not None and engine.delegate_hint else ""
            return (f"WARNING: {len(named)} op{'' if one else 's'} outside {self.delegate} {'takes' if one else 'take'} "
                    f"{share:.0f}% of the measured time: {names}{counted}. Speed-up: have {self.delegate} take "
                    f"{'it' if one else 'them'} or change the model to avoid {'it' if one else 'them'}{why}")
        if outside_pct > OUTSIDE_PERCENT:
            n = sum(1 for o in self.ops if not o.inside)
            return (f"WARNING: {outside_pct:.0f}% of the measured time is spent outside {self.delegate}, in {n} "
                    f"op(s){counted}")
        return None

    def summary(self) -> str:
        if not self.available:
            return f"time profile unavailable ({self.runtime}): {self.reason}"
        head = (f"time profile of {self.path} ({self.source}, {self.threads} thread(s), median of {self.runs} runs): "
                f"{self.total_us / 1e3:.3f} ms per run")
        if self.delegate:
            head += (f"; inside {self.delegate} {self.inside_us / 1e3:.3f} ms ({self.inside_percent:.1f}%), "
                     f"outside {self.outside_us / 1e3:.3f} ms ({self.outside_percent:.1f}%), "
                     f"runtime between ops {self.overhead_us / 1e3:.3f} ms ({self.percent(self.overhead_us):.1f}%)")
        else:
            head += "; no delegate (every op runs on the runtime's own kernels)"
        return head

    def lines(self, top: int = 12) -> list[str]:
        """The terminal table: summary, per-op-kind rows (slowest first), delegate-internal ops, the WARNING."""
        out = [self.summary()]
        if not self.available:
            return out + [f"  note: {n}" for n in self.notes]
        rows = self.by_op()
        out.append(f"  {'op':<34} {'where':<22} {'count':>5} {'ms/run':>9} {'share':>6}")
        for op, where, n, us in rows[:top]:
            out.append(f"  {op[:34]:<34} {where[:22]:<22} {n:>5} {us / 1e3:>9.3f} {self.percent(us):>5.1f}%")
        if len(rows) > top:
            rest = sum(r[3] for r in rows[top:])
            out.append(f"  {f'({len(rows) - top} more op kinds)':<34} {'':<22} {'':>5} {rest / 1e3:>9.3f} "
                       f"{self.percent(rest):>5.1f}%")
        if self.delegate_ops:
            out.append(f"  inside {self.delegate} (its own profiler; part of the delegate calls above):")
            grouped: dict[str, float] = collections.defaultdict(float)
            count: collections.Counter = collections.Counter()
            for o in self.delegate_ops:
                grouped[instance_free(o.op)] += o.time_us
                count[instance_free(o.op)] += 1
            for op, us in sorted(grouped.items(), key=lambda kv: -kv[1])[:top]:
                out.append(f"    {op[:50]:<50} {count[op]:>5} {us / 1e3:>9.3f} {self.percent(us):>5.1f}%")
        out += [f"  note: {n}" for n in self.notes]
        warning = self.warning()
        if warning:
            out.append(warning)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "runtime": self.runtime, "source": self.source, "delegate": self.delegate,
                "threads": self.threads, "runs": self.runs, "available": self.available, "reason": self.reason,
                "total_us": round(self.total_us, 3), "inside_us": round(self.inside_us, 3),
                "outside_us": round(self.outside_us, 3), "overhead_us": round(self.overhead_us, 3),
                "inside_percent": _round(self.inside_percent), "outside_percent": _round(self.outside_percent),
                "ops_in_delegate": self.ops_in_delegate, "ops_total": self.ops_total,
                "ops": [o.to_json() for o in self.ops], "delegate_ops": [o.to_json() for o in self.delegate_ops],
                "warning": self.warning(), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TimeProfile":
        keys = {f.name for f in dataclasses.fields(cls)} - {"ops", "delegate_ops"}
        profile = cls(**{k: data[k] for k in keys if k in data})
        profile.ops = [OpTime(**o) for o in data.get("ops") or []]
        profile.delegate_ops = [OpTime(**o) for o in data.get("delegate_ops") or []]
        return profile


def instance_free(name: str) -> str:
    """A delegate op's name without its instance number: XNNPACK's ``Convolution (NHWC, F32) IGEMM #2`` ->
    ``Convolution (NHWC, F32) IGEMM``."""
    return re.sub(r"\s+#\d+$", "", name)


def unavailable(path: str, runtime: str, source: str, threads: int, reason: str) -> TimeProfile:
    """A profile that could not be recorded, saying why."""
    return TimeProfile(str(path), runtime, source, None, threads, 0, available=False, reason=reason)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
