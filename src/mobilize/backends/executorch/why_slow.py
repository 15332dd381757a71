""""Why is int8 not faster" for two ExecuTorch files (``Backend.why_slow``), from their ETDump profiles
(:mod:`mobilize.backends.executorch.profiler`): op kinds that take longer in int8, ops that run *outside* the
delegate in int8 but not in fp32 (they fell out of it), unfused quantize/dequantize (``quantize_per_tensor``
kernels outside the delegate; XNNPACK's own ``Convert`` operators inside it, from its profiler), layout conversions
(``_to_dim_order_copy``, ``permute_copy``; XNNPACK ``Transpose``/``Copy``), the share of time outside the delegate
in each, and whether this CPU has int8 dot-product instructions.

    >>> is_pte_conversion("aten.permute_copy"), is_pte_conversion("XNNPACK Convert"), is_pte_conversion("aten.add")
    (True, True, False)
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any, Sequence

from mobilize.profile.diagnosis import Diagnosis, host_int8

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


def why_not_faster(fp32: Path, int8: Path, inputs: Sequence[Any], runs: int, threads: int = 1) -> Diagnosis:
    """Both files profiled with ETDump on the same input, then :func:`diagnose_pte`."""
    from mobilize.backends.executorch.profiler import profile_pte

    return diagnose_pte(profile_pte(fp32, inputs, threads, runs), profile_pte(int8, inputs, threads, runs))


def diagnose_pte(fp: Any, q: Any) -> Diagnosis:
    """Compare two ExecuTorch :class:`~mobilize.profile.core.TimeProfile` s (fp32, int8) of one model."""
    cpu, dot = host_int8()
    missing = [f"{p.path}: {p.reason}" for p in (fp, q) if not p.available]
    if missing:
        return Diagnosis({}, {}, 0, [], cpu, dot, 0, q.runtime, fp32_profile=fp, int8_profile=q,
                         reason="; ".join(missing))
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
    fp_us, q_us = pte_op_times(fp), pte_op_times(q)
    headline = (f"why is int8 not faster: int8 {q.total_us / 1e3:.3f} ms vs fp32 {fp.total_us / 1e3:.3f} ms per run "
                f"(ExecuTorch ETDump, {q.threads} thread(s), median of {q.runs} runs)")
    return Diagnosis(fp_us, q_us, len(qdq), qdq, cpu, dot, q.runs, q.runtime, headline=headline,
                     notes=_notes(fell_out, layout, q, qdq),
                     conversions=frozenset(op for op in {*fp_us, *q_us} if is_pte_conversion(op)),
                     fell_out=fell_out, layout_ops=layout, fp32_profile=fp, int8_profile=q)


def _notes(fell_out: dict[str, int], layout: dict[str, tuple[int, int]], q: Any, qdq: list[str]) -> list[str]:
    out = []
    if fell_out:
        out.append("  fell out of the delegate in int8 (run outside it, not in fp32): "
                   + ", ".join(f"{op} x{n}" for op, n in sorted(fell_out.items(), key=lambda kv: -kv[1])))
    if layout:
        out.append("  more layout/dtype conversions in int8: "
                   + ", ".join(f"{op} {a} -> {b}" for op, (a, b) in layout.items()))
    if q.warning():
        out.append(f"  int8 {q.warning()}")
    if qdq:
        out.append(f"  {len(qdq)} unfused quantize/dequantize op(s) (kernels outside the delegate, Convert inside it; "
                   f"each converts float<->int8 on every run: at the float inputs and outputs, or around ops that "
                   f"stay float), e.g. {', '.join(qdq[:3])}")
    return out
