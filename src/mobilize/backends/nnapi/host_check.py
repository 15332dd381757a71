"""The host check: the NNAPI file (host interpreter) against its CPU twin (lite interpreter).

Two comparisons, both on the same inputs (real samples with --data, else seeded random):

* **per operation**: every NNAPI operation is fed the twin's own values of its inputs (taken from
  the traced graph the converter read, operand by operand) and its output is compared with the
  twin's value there.  This checks the conversion and NNAPI's arithmetic op by op, free of error
  carried from earlier layers.  The verify core judges each one with the Policy's rules: a quantized
  output by rule op-steps (at least 99% of its elements within one quantization step: NNAPI's
  reference rounds twice in fixed point, ``-72.4994`` becoming ``-73``, where qnnpack rounds once in
  float), a float output by rule float-sqnr, as every float file is judged.
* **end to end**: the two files' outputs.  Float mode by rule float-sqnr (a fixed absolute tolerance
  fails on x86 kernels that round differently, AVX2 vs AVX-512, once logits reach ~80).  Quantized
  modes in output quantization steps, by rule output-steps: the twin is the same quantized graph run
  by other kernels (qnnpack), so each operation may land a step apart (the per-operation check
  measures on what share, up or down), and those steps compound through the network - MobileNetV2
  reaches 20 steps on a seeded net at 64x64, 3 on the digits-trained one, with every op within a
  step.  No fixed share-within-one-step separates that from a wrong file, so the bound comes from a
  model of the compounding run on the file itself: the NNAPI graph again, each quantized operation's
  output moved one step up or down on the shares its own check measured (seeded draws), against the
  same graph unmoved.  Measured/model RMS was 0.68-1.40 on 2-sample checks of trained and seeded
  MobileNetV2s; the file fails when its RMS or largest step difference passes the Policy's multiple
  (``output_steps_max_ratio``) of the model's (at least one step), e.g. a conv whose weights or bias
  moved: every figure is in the verdict.  An operation off by at most one step on many elements (NNAPI's
  MEAN truncates where qnnpack rounds) enters the model at the share measured: a systematic one-step
  shift passes both rules.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from mobilize.accuracy.verify import DEFAULT_POLICY, Kind, Policy, Verdict, compare_outputs, judge, judge_steps
from mobilize.core.outcome import Outcome
from mobilize.core.artifact import Artifact
from mobilize.core.context import Context
from mobilize.backends.nnapi import nnapi_format as fmt


@dataclasses.dataclass
class Probe:
    """The frozen graph the converter serialized, and which of its values each NNAPI operand holds."""

    frozen: Any
    values: dict[int, Any]
    """NNAPI operand index -> the TorchScript value it was made from."""
    channels_last: set[int]
    """Operands NNAPI holds as NHWC while torch holds them as NCHW."""

    @classmethod
    def from_serializer(cls, serializer: Any) -> "Probe":
        from torch.backends._nnapi.serializer import DimOrder

        values: dict[int, Any] = {}
        for value, index in serializer.jitval_operand_map.items():
            values.setdefault(index, value)
        nhwc = {i for i in values if serializer.operands[i].dim_order is DimOrder.CHANNELS_LAST}
        return cls(serializer.model, values, nhwc)

    def run(self, inputs: list) -> dict[int, Any]:
        """Every probed value for these inputs (the graph is rewritten once to return them all)."""
        import torch

        if not hasattr(self, "_fn"):
            graph = self.frozen.graph
            self._order = sorted(self.values)
            vals = [self.values[i] for i in self._order]
            ret = graph.return_node()
            tup = graph.create("prim::TupleConstruct", vals)
            tup.insertBefore(ret)
            tup.output().setType(torch._C.TupleType([v.type() for v in vals]))
            ret.replaceInput(0, tup.output())
            self._fn = torch._C._create_function_from_graph("nnapi_probe", graph)
        with torch.inference_mode():
            outs = self._fn(self.frozen._c, *inputs)
        return dict(zip(self._order, outs))


def check_inputs(ctx: Context, count: int = 2) -> tuple[list[list], str]:
    if ctx.data is not None:
        return ctx.data.sample_lists(ctx.input_specs, count), f"{count} real samples from {ctx.data.reference}"
    return [ctx.example_inputs(seed=123 + i) for i in range(count)], f"{count} seeded random inputs"


def per_operation(probe: Probe, payload: fmt.Payload, core_inputs: list[list],
                  policy: Policy = DEFAULT_POLICY) -> dict[str, Any]:
    """Each operation on the twin's values of its inputs, against the twin's value of its output, judged by
    the verify core: quantized outputs in quantization steps (rule op-steps), float outputs like any float
    file (rule float-sqnr).

    Long because it walks the serialized operations once, keeping the twin's values of every operand as it goes."""
    from mobilize.backends.nnapi.interpreter import KERNELS, Interpreter

    interpreter = Interpreter(fmt.parse_model(payload.ser_model), payload.weights)
    model, operands = interpreter.model, interpreter.operands
    steps: dict[str, list[int]] = {}
    """op -> [elements, within one step, identical] (quantized outputs)"""
    moved: dict[int, list[int]] = {}
    """op index -> [elements, above the twin's, below it] (quantized outputs: the rounding model's shares)"""
    floats: dict[str, tuple[list, list, list[int]]] = {}
    """op -> (its outputs, the twin's, [identical elements]) (float outputs)"""
    for sample in core_inputs:
        known = {}
        for index, value in probe.run(sample).items():
            t = _as_operand(value, operands[index], index in probe.channels_last)
            if t is not None:
                known[index] = t
        env = {**interpreter.constants, **known}
        for k, op in enumerate(model.operations):
            out = KERNELS[op.name]([env[i] for i in op.inputs], [operands[i] for i in op.inputs],
                                   [operands[i] for i in op.outputs])
            index = op.outputs[0]
            if index not in known:
                env[index] = out
                continue
            ref, name = known[index], f"{op.name} #{k}"
            if operands[index].type == fmt.TENSOR_QUANT8_ASYMM:
                diff = (out - ref).abs()
                counts = steps.setdefault(name, [0, 0, 0])
                counts[0] += diff.numel()
                counts[1] += int((diff <= 1).sum())
                counts[2] += int((diff == 0).sum())
                signs = moved.setdefault(k, [0, 0, 0])
                signs[0], signs[1], signs[2] = signs[0] + diff.numel(), signs[1] + int((out > ref).sum()), \
                    signs[2] + int((out < ref).sum())
            else:
                got, expected, identical = floats.setdefault(name, ([], [], [0]))
                got.append([out])
                expected.append([ref])
                identical[0] += int((out == ref).sum())
    verdicts = {op: judge_steps(op, e, w, policy) for op, (e, w, _) in steps.items()}
    verdicts.update({op: judge(compare_outputs(g, r), Kind.FLOAT, policy) for op, (g, r, _) in floats.items()})
    elements = {op: c[0] for op, c in steps.items()} | {op: sum(x[0].numel() for x in g) for op, (g, _, _) in floats.items()}
    identical = {op: c[2] for op, c in steps.items()} | {op: i[0] for op, (_, _, i) in floats.items()}

    def describe(op: str) -> str:
        share = identical[op] / max(elements[op], 1)
        if op in steps:
            return f"{op} at {steps[op][1] / max(elements[op], 1):.2%} ({share:.2%} identical)"
        return f"{op} at SQNR {verdicts[op].reason.split(' dB')[0].removeprefix('SQNR ')} dB ({share:.2%} identical)"

    def badness(op: str) -> tuple:
        if op in steps:
            return (verdicts[op].ok, 0, steps[op][1] / max(elements[op], 1))
        return (verdicts[op].ok, 1, verdicts[op].numbers.get("sqnr_db") or float("inf"))

    worst = min(verdicts, key=badness, default=None)
    total = sum(elements.values())
    failed = [v.reason for v in verdicts.values() if not v.ok]
    return {"operations_compared": len(verdicts), "operations": len(model.operations), "elements": total,
            "quantized_elements": sum(c[0] for c in steps.values()),
            "within_fraction": sum(c[1] for c in steps.values()) / max(sum(c[0] for c in steps.values()), 1),
            "identical_fraction": sum(identical.values()) / total if total else 1.0, "worst_op": worst,
            "worst": describe(worst) if worst else "none", "ok": not failed, "failed": failed,
            "moved_shares": {k: (up / n, down / n) for k, (n, up, down) in moved.items() if n and (up or down)},
            "rule": f"every quantized operation: rule op-steps (>= {policy.op_min_within_one_step:.0%} of its "
                    f"elements within one step); every float operation: rule float-sqnr "
                    f"(>= {policy.float_min_sqnr_db:g} dB)"}


def _as_operand(value: Any, op: fmt.Operand, channels_last: bool) -> Any:
    """A torch value as NNAPI holds it (layout, integer values), or None when it does not fit the operand."""
    import torch

    if not isinstance(value, torch.Tensor):
        return None
    if channels_last and value.dim() == 4:
        value = value.permute(0, 2, 3, 1)
    if tuple(value.shape) != tuple(op.dims):
        return None
    if op.type == fmt.TENSOR_QUANT8_ASYMM:
        if not value.is_quantized or abs(value.q_scale() - op.scale) > 1e-6 * op.scale \
                or value.q_zero_point() != op.zero_point:
            return None
        return value.int_repr().long().contiguous()
    if op.type == fmt.TENSOR_FLOAT32 and value.dtype == torch.float32:
        return value.contiguous()
    return None


def rounding_model(probe: Probe, payload: fmt.Payload, core_inputs: list[list], shares: dict[int, tuple[float, float]],
                   draws: int = 4, seed: int = 0) -> list:
    """How far apart in steps the outputs of two correct kernel sets land: the NNAPI graph run as is, and run again
    ``draws`` times with each quantized operation k's output moved one step up on a share ``shares[k][0]`` of its
    elements and down on ``shares[k][1]`` (the shares its own check measured), on the same inputs.  Returns the
    absolute step differences of every quantized output (one flat tensor per run)."""
    import torch

    from mobilize.backends.nnapi.interpreter import Interpreter

    interpreter = Interpreter(fmt.parse_model(payload.ser_model), payload.weights)
    operands, generator = interpreter.operands, torch.Generator().manual_seed(seed)

    def move(k: int, out: Any) -> Any:
        if k not in shares:
            return out
        up, down = shares[k]
        u = torch.rand(out.shape, generator=generator)
        return (out + (u < up).long() - ((u >= up) & (u < up + down)).long()).clamp(0, 255)

    quantized = [k for k, i in enumerate(interpreter.model.outputs) if operands[i].type == fmt.TENSOR_QUANT8_ASYMM]
    diffs = []
    for sample in core_inputs:
        inputs = [_as_operand(t, operands[i], i in probe.channels_last)
                  for t, i in zip(sample, interpreter.model.inputs)]
        if any(t is None for t in inputs):
            return []
        clean = interpreter.run(inputs)
        for _ in range(draws):
            moved = interpreter.run(inputs, move)
            diffs += [(moved[k] - clean[k]).abs().flatten() for k in quantized]
    return diffs


def judge_output_steps(observed: Any, model: Any, policy: Policy = DEFAULT_POLICY) -> Verdict:
    """An int8 file's outputs against its int8 twin's, in quantization steps, against what the rounding model gives
    (rule output-steps): the RMS and the largest difference within ``policy.output_steps_max_ratio`` times the
    model's, and at least one step."""
    def figures(steps: Any) -> tuple[float, float, int]:
        f = steps.double()
        return float((f <= 1).double().mean()), float(f.pow(2).mean().sqrt()), int(f.max())

    within, rms, largest = figures(observed)
    model_within, model_rms, model_largest = figures(model)
    ratio = policy.output_steps_max_ratio
    rms_bound, max_bound = max(ratio * model_rms, 1.0), max(math.ceil(ratio * model_largest), 1)
    numbers = {"elements": observed.numel(), "within_one_step_fraction": within, "rms_steps": rms,
               "max_steps": largest, "model_within_one_step_fraction": model_within, "model_rms_steps": model_rms,
               "model_max_steps": model_largest, "max_rms_steps": rms_bound, "max_max_steps": max_bound,
               "max_ratio": ratio}
    ok = rms <= rms_bound and largest <= max_bound
    reason = (f"{within:.2%} of {observed.numel()} output elements within one step (rounding model: {model_within:.2%}), "
              f"RMS {rms:.2f} steps {'<=' if rms <= rms_bound else '>'} {rms_bound:.2f}, max {largest} steps "
              f"{'<=' if largest <= max_bound else '>'} {max_bound} ({ratio:g} x the rounding model's RMS "
              f"{model_rms:.2f} and max {model_largest}, at least 1 step) (rule output-steps)")
    return Verdict(Outcome.OK if ok else Outcome.MISMATCH, "output-steps", reason, numbers)


def end_to_end(nnapi: Artifact, twin: Artifact, samples: list[list], policy: Policy = DEFAULT_POLICY,
               model: list | None = None) -> dict[str, Any]:
    """The two files' outputs on ``samples``: a float file by the float rule, a quantized one by rule output-steps
    against ``model`` (:func:`rounding_model`'s differences; without it, by the quantized SQNR rule, and said)."""
    import torch

    from mobilize.runtimes.base import open_session

    with open_session(nnapi, "nnapi_host") as session:
        got = [session.run(x) for x in samples]
        steps = [session.model.operands[i].scale for i in session.model.outputs]
    with open_session(twin, "lite") as session:
        expected = [session.run(x) for x in samples]
    diffs, step_diffs = [], []
    for g_sample, e_sample in zip(got, expected):
        for k, (g, e) in enumerate(zip(g_sample, e_sample)):
            if g.shape != e.shape or g.is_quantized != e.is_quantized:
                return {"ok": False, "summary": f"output {k} is {tuple(g.shape)} {g.dtype}, the twin's "
                                                f"{tuple(e.shape)} {e.dtype}"}
            gf, ef = (g.dequantize(), e.dequantize()) if g.is_quantized else (g.float(), e.float())
            diffs.append((gf - ef).abs().flatten())
            if steps[k] > 0:
                step_diffs.append(torch.round(diffs[-1] / steps[k]).long())
    diff = torch.cat(diffs)
    result: dict[str, Any] = {"elements": diff.numel(), "max_abs": float(diff.max()) if diff.numel() else 0.0}
    verdict = judge(compare_outputs(got, expected), Kind.FLOAT if not step_diffs else Kind.QUANTIZED, policy)
    if not step_diffs:
        result["verdict"], result["ok"] = verdict.to_json(), verdict.ok
        result["summary"] = f"max abs difference {result['max_abs']:.2e} over {diff.numel()} output elements; {verdict.reason}"
        return result
    s = torch.cat(step_diffs)
    sqnr = verdict.numbers.get("sqnr_db")
    result.update(within_one_step_fraction=float((s <= 1).float().mean()), beyond_one_step=int((s > 1).sum()),
                  max_steps=int(s.max()), step=steps[0], sqnr_db=sqnr)
    if verdict.ok and model:
        verdict = judge_output_steps(s, torch.cat(model), policy)
    elif verdict.ok:
        verdict.reason += "; no rounding model (the per-operation check did not run), so no output-steps rule"
    result["verdict"], result["ok"] = verdict.to_json(), verdict.ok
    figures = f"output step {steps[0]:.4g}, SQNR {'n/a' if sqnr is None else f'{sqnr:.1f}'} dB"
    result["summary"] = f"{verdict.reason}; {figures}" if verdict.rule == "output-steps" else (
        f"{result['within_one_step_fraction']:.2%} of {s.numel()} output elements within 1 step, "
        f"{result['beyond_one_step']} beyond, max {result['max_steps']} steps, {figures}; {verdict.reason}")
    return result


def compare_with_twin(nnapi: Artifact, twin: Artifact, ctx: Context, probe: Probe | None, payload: fmt.Payload,
                      core_qparams: tuple[float, int] | None, full: bool) -> dict[str, Any]:
    """``core_qparams``: how the traced core's input is quantized (core and full modes); ``full``: the files take
    quint8 input too."""
    import torch

    samples, source = check_inputs(ctx)

    def quantized(s: list) -> list:
        return [torch.quantize_per_tensor(t.float(), *core_qparams, torch.quint8) for t in s]

    core_inputs = [quantized(s) if core_qparams else s for s in samples]
    core_inputs = [[t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in s]
                   for s in core_inputs]
    ops = per_operation(probe, payload, core_inputs[:1]) if probe is not None else None
    shares = ops.pop("moved_shares") if ops else {}
    model = rounding_model(probe, payload, core_inputs, shares) if ops and ops["quantized_elements"] else None
    e2e = end_to_end(nnapi, twin, core_inputs if full else samples, model=model)
    result: dict[str, Any] = {"inputs": source, "end_to_end": e2e}
    if ops is not None:
        result["per_operation"] = ops
        result["ok"] = ops["ok"] and e2e["ok"]
        head = (f"per operation (each fed the twin's values, first input): {ops['operations_compared']} of "
                f"{ops['operations']} ops compared, " + (
                    f"{ops['within_fraction']:.2%} of {ops['quantized_elements']} elements within 1 step "
                    if ops["quantized_elements"] else f"{ops['elements']} elements ")
                + f"({ops['identical_fraction']:.2%} identical), worst {ops['worst']}"
                + (f"; {'; '.join(ops['failed'])}" if ops["failed"] else ""))
    else:
        result["ok"], head = e2e["ok"], "per operation: not run"
    result["summary"] = f"{source}: {head}; end to end: {e2e['summary']}"
    return result
