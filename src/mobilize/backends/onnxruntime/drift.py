"""Per-layer drift of an ONNX Runtime static int8 (QDQ) model against its float twin, on real samples.

Built on ONNX Runtime's own debugging API (``onnxruntime.quantization.qdq_loss_debug``): both
models are augmented to output every activation (``modify_model_output_intermediate_tensors``),
run on the same samples (``collect_activations``), matched tensor by tensor
(``create_activation_matching``) and scored (``compute_activation_error``), giving for every
quantized activation:

- ``qdq_sqnr_db``: its own quantization noise (before vs after its QuantizeLinear/DequantizeLinear
  pair in the int8 model).  A huge outlier hides here: it dominates the norm, so the SQNR looks fine
  while every other value in the tensor is rounded to zero.
- ``drift_sqnr_db``: the int8 model's activation against the float model's (all error accumulated
  up to that point).
- ``alone_sqnr_db``: the model's final outputs when *only this tensor* is quantized (the float model
  with the int8 model's scale and zero point inserted as one Q/DQ pair there).  This is what ranks:
  it says how much accuracy this one layer costs, whatever came before it.

The float model must be the one the quantizer saw (after ``quant_pre_process``), so that tensor
names match; :func:`preprocessed_float` makes it from a float ``.onnx``.
"""

from __future__ import annotations

from mobilize.accuracy.drift import LayerDrift
from mobilize.accuracy.metrics import sqnr_from_powers
from mobilize.backends.onnxruntime.sessions import ort_session, session_options

import dataclasses
import math
import tempfile
from pathlib import Path
from typing import Any, Sequence



@dataclasses.dataclass(frozen=True)
class LayerError(LayerDrift):
    """One quantized activation tensor of the QDQ graph (``producer``/``consumers``: float-model node names) and
    what its quantization costs."""

    fused_into: str | None = None
    """When the producer is an activation (Relu, Clip) the quantizer folds into the node before it, that
    node: its output carries this tensor's Q/DQ pair."""
    float_abs_max: float | None = None
    """The largest magnitude of the float model's values at this tensor over the samples (a masking constant
    shows here: :attr:`~mobilize.accuracy.drift.LayerDrift.masking`)."""

    def _heads(self) -> tuple[str | None, ...]:
        return (self.fused_into, self.producer)


def preprocessed_float(float_onnx: Path, dst: Path) -> Path:
    """The float model as the quantizer sees it (``quant_pre_process``), so tensor names match."""
    from mobilize.backends.onnxruntime.quant import pre_process

    pre_process(float_onnx, dst)
    return dst


def feeds_for(model_path: Path, samples: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """ONNX Runtime feeds (name -> numpy) for samples given as lists of torch tensors or arrays."""
    import numpy as np
    import onnx

    from mobilize.lowering.onnx_export import real_inputs

    names = [i.name for i in real_inputs(onnx.load(str(model_path), load_external_data=False))]
    return [{n: np.asarray(getattr(x, "numpy", lambda: x)()) for n, x in zip(names, s)}
            for s in samples]


def localise(float_pre: Path, qdq: Path, feeds: Sequence[dict[str, Any]], ablate: int | None = 64) -> list[LayerError]:
    """Every quantized activation of ``qdq`` scored on ``feeds``; worst first (lowest :attr:`score_db`).

    ``ablate``: measure the alone-quantized SQNR for at most this many tensors (None: all)."""
    import onnx
    from onnxruntime.quantization.qdq_loss_debug import modify_model_output_intermediate_tensors

    with tempfile.TemporaryDirectory(prefix="mobilize-drift-") as tmp_dir:
        tmp = Path(tmp_dir)
        aug_f, aug_q = tmp / "float-aug.onnx", tmp / "qdq-aug.onnx"
        modify_model_output_intermediate_tensors(str(float_pre), str(aug_f))
        modify_model_output_intermediate_tensors(str(qdq), str(aug_q))
        errors = activation_errors(aug_f, aug_q, feeds)

    float_model = onnx.load(str(float_pre))
    qdq_model = onnx.load(str(qdq))
    producers = {o: n for n in float_model.graph.node for o in n.output}
    consumers: dict[str, list[str]] = {}
    for n in float_model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n.name)
    qparams = _qparams(qdq_model)
    reference = _final_outputs(float_model, feeds)
    drifts = sorted(errors, key=lambda t: errors[t].get("xmodel_err", math.inf))
    ablated = set(drifts if ablate is None else _ablation_order(errors, ablate))
    layers = []
    for tensor, err in errors.items():
        node = producers.get(tensor)
        alone = None
        if tensor in ablated and tensor in qparams:
            alone = _alone_sqnr(float_model, tensor, qparams[tensor], feeds, reference)
        layers.append(LayerError(tensor, node.name if node is not None else None,
                                 node.op_type if node is not None else "input", tuple(consumers.get(tensor, ())),
                                 float(err["qdq_err"]), float(err.get("xmodel_err", math.nan)), alone,
                                 _fused_into(node, producers), err.get("float_abs_max")))
    return sorted(layers, key=lambda l: (l.alone_sqnr_db is None, l.score_db, l.drift_sqnr_db))


def activation_errors(aug_float: Path, aug_qdq: Path, feeds: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """ONNX Runtime's ``compute_activation_error(create_activation_matching(collect_activations(...)))``, one sample
    at a time: per activation the sums of squares its SQNRs are made of, never every activation of every sample.

    ONNX Runtime's ``collect_activations`` keeps every intermediate tensor of every sample of both models in memory
    (a sentence encoder: gigabytes over 32 samples); the norm of the concatenation is the root of the summed squares,
    so the figures are the same (``qdq_err``: pre vs post Q/DQ in the int8 model; ``xmodel_err``: the float model's
    activation vs the int8 model's post-Q/DQ one)."""
    import numpy as np

    float_session = ort_session(aug_float, session_options(level="disable"))
    qdq_session = ort_session(aug_qdq, session_options(level="disable"))
    f_names = _saved(float_session)
    q_names = _saved(qdq_session)
    pairs = _qdq_pairs(list(q_names.values()))
    sums: dict[str, np.ndarray] = {}  # name -> [|pre|^2, |pre-post|^2, |float|^2, |float-post|^2, max |float|]
    for feed in feeds:
        got_f = {f_names[i]: a for i, a in enumerate(float_session.run(None, feed)) if i in f_names}
        got_q = {q_names[i]: a for i, a in enumerate(qdq_session.run(None, feed)) if i in q_names}
        for name, (pre_key, post_key) in pairs.items():
            if name not in got_f:
                continue
            pre, post, ref = (np.asarray(got_q[pre_key], np.float64), np.asarray(got_q[post_key], np.float64),
                              np.asarray(got_f[name], np.float64))
            acc = sums.setdefault(name, np.zeros(5))
            acc[:4] += (float((pre ** 2).sum()), float(((pre - post) ** 2).sum()), float((ref ** 2).sum()),
                        float(((ref - post) ** 2).sum()))
            acc[4] = max(acc[4], float(np.abs(ref).max()) if ref.size else 0.0)
        del got_f, got_q
    return {name: {"qdq_err": _sqnr_db(acc[0], acc[1]), "xmodel_err": _sqnr_db(acc[2], acc[3]),
                   "float_abs_max": float(acc[4])} for name, acc in sums.items()}


def _saved(session: Any) -> dict[int, str]:
    """Output index -> activation name, for the outputs ``modify_model_output_intermediate_tensors`` added."""
    from onnxruntime.quantization.qdq_loss_debug import _TENSOR_SAVE_POSTFIX

    return {i: o.name[: -len(_TENSOR_SAVE_POSTFIX)] for i, o in enumerate(session.get_outputs())
            if o.name.endswith(_TENSOR_SAVE_POSTFIX)}


def _qdq_pairs(names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Activation -> (its tensor before Q/DQ, after), matched as ``create_activation_matching`` does (the last
    match of a name wins, as there)."""
    from onnxruntime.quantization.quant_utils import DEQUANT_OUTPUT_SUFFIX, QUANT_INPUT_SUFFIX

    present, pairs = set(names), {}
    for name in names:
        for suffix, before in ((QUANT_INPUT_SUFFIX, True), (DEQUANT_OUTPUT_SUFFIX, False),
                               (DEQUANT_OUTPUT_SUFFIX + "_1", False)):
            if name.endswith(suffix):
                base = name[: -len(suffix)]
                if base in present:
                    pairs[base] = (name, base) if before else (base, name)
                break
    return pairs


def _sqnr_db(signal_sq: float, noise_sq: float) -> float:
    """``compute_signal_to_quantization_noice_ratio`` from sums of squares (its epsilon floor on both norms)."""
    import numpy as np

    floor = float(np.finfo("float").eps) ** 2  # its epsilon floors each norm: here each sum of squares
    return sqnr_from_powers(max(signal_sq, floor), max(noise_sq, floor))


_FOLDED_ACTIVATIONS = ("Relu", "Clip")
"""Activations ONNX Runtime's QDQ quantizer removes after a quantized node (they share its output's range)."""


def _fused_into(node: Any, producers: dict[str, Any]) -> str | None:
    if node is None or node.op_type not in _FOLDED_ACTIVATIONS or not node.input:
        return None
    before = producers.get(node.input[0])
    return before.name if before is not None else None


def _ablation_order(errors: dict[str, dict[str, float]], limit: int) -> list[str]:
    """Which tensors to ablate when not all: those with the lowest local or accumulated SQNR, alternately."""
    by_qdq = sorted(errors, key=lambda t: errors[t]["qdq_err"])
    by_drift = sorted(errors, key=lambda t: errors[t].get("xmodel_err", math.inf))
    out: list[str] = []
    for pair in zip(by_qdq, by_drift):
        for t in pair:
            if t not in out and len(out) < limit:
                out.append(t)
    return out


def _qparams(qdq_model: Any) -> dict[str, tuple[Any, Any]]:
    """Activation tensor -> (scale, zero point) arrays of the QuantizeLinear that reads it."""
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in qdq_model.graph.initializer}
    out = {}
    for n in qdq_model.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] not in inits and n.input[1] in inits:
            zp = inits.get(n.input[2]) if len(n.input) > 2 else None
            out.setdefault(n.input[0], (inits[n.input[1]], zp))
    return out


def _final_outputs(model: Any, feeds: Sequence[dict[str, Any]]) -> list[list[Any]]:

    session = ort_session(model, session_options(threads=1))
    return [session.run(None, f) for f in feeds]


def _alone_sqnr(float_model: Any, tensor: str, qparams: tuple[Any, Any], feeds: Sequence[dict[str, Any]],
                reference: list[list[Any]]) -> float:
    """Final-output SQNR of the float model with one Q/DQ pair (the int8 model's) on ``tensor``."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    scale, zp = qparams
    model = onnx.ModelProto()
    model.CopyFrom(float_model)
    g = model.graph
    tag = f"mobilize_fq_{abs(hash(tensor)) % 10**8}"
    g.initializer.append(numpy_helper.from_array(np.asarray(scale), f"{tag}_scale"))
    inputs = [tensor, f"{tag}_scale"]
    if zp is not None:
        g.initializer.append(numpy_helper.from_array(np.asarray(zp), f"{tag}_zp"))
        inputs.append(f"{tag}_zp")
    for n in g.node:
        for i, name in enumerate(n.input):
            if name == tensor:
                n.input[i] = f"{tag}_dq"
    q = helper.make_node("QuantizeLinear", inputs, [f"{tag}_q"], name=f"{tag}_Q")
    dq = helper.make_node("DequantizeLinear", [f"{tag}_q"] + inputs[1:], [f"{tag}_dq"], name=f"{tag}_DQ")
    position = next((k + 1 for k, n in enumerate(g.node) if tensor in n.output), 0)
    nodes = list(g.node)
    nodes[position:position] = [q, dq]
    del g.node[:]
    g.node.extend(nodes)
    for out in g.output:
        if out.name == tensor:  # a graph output read directly: leave it float
            return math.inf
    session = ort_session(model, session_options(threads=1))
    signal = noise = 0.0
    for f, ref in zip(feeds, reference):
        for got, want in zip(session.run(None, f), ref):
            want64, got64 = np.asarray(want, np.float64), np.asarray(got, np.float64)
            signal += float((want64 ** 2).sum())
            noise += float(((got64 - want64) ** 2).sum())
    return sqnr_from_powers(signal, noise)


def format_table(layers: Sequence[LayerError], top: int = 10) -> list[str]:
    """The ranked table for the terminal."""

    def db(x: float | None) -> str:
        return "-" if x is None else ("inf" if x == math.inf else f"{x:.1f}")

    rows = [f"{'rank':>4}  {'tensor':<28} {'op':<14} {'alone dB':>8} {'drift dB':>8} {'qdq dB':>7}"]
    for k, l in enumerate(layers[:top], 1):
        rows.append(f"{k:>4}  {l.tensor[:28]:<28} {l.op_type[:14]:<14} {db(l.alone_sqnr_db):>8} "
                    f"{db(l.drift_sqnr_db):>8} {db(l.qdq_sqnr_db):>7}")
    return rows
