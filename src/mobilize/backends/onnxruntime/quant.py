"""ONNX → ONNX steps on ONNX Runtime: pre-processing, static QDQ and dynamic int8, ORT format.

Private helpers of the ``onnx`` exporter.  Calibration streams batches from a data source
through ONNX Runtime's calibrators a few batches at a time (memory stays bounded whatever
``calibration_samples`` is), then quantizes from the collected ranges.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from mobilize.backends.onnxruntime.messages import explain
from mobilize.core.registry import did_you_mean
from mobilize.core.errors import ConfigError, UnsupportedModelError, third_party_failure, translate_errors
from mobilize.lowering.onnx_export import native_output, opset_of, real_inputs

PER_CHANNEL_MIN_OPSET = 13
"""Per-axis QuantizeLinear/DequantizeLinear (per-channel weights) needs ai.onnx opset 13."""
CHUNK_SAMPLES = 8
"""Samples run through a calibrator per collect step: bounds the intermediate tensors kept in memory."""
_ORT_LOGGERS = ("", "onnxruntime.quantization.shape_inference", "onnxruntime.tools.symbolic_shape_infer")
"""The root logger (where ORT's quantizer logs) and the ORT tool modules' own loggers."""
U8S8_NOTE = ("static int8 as QDQ with uint8 activations and int8 per-channel weights (U8S8): on x64 ONNX "
             "Runtime fuses QDQ into QLinearConv/QGemm kernels with its fastest U8S8 paths; int8 activations "
             "(S8S8) on x64 run slower kernels, and the QOperator format skips the runtime's QDQ fusions")


@dataclasses.dataclass(frozen=True)
class StaticOptions:
    calibration: str = "minmax"
    per_channel: bool = True
    reduce_range: bool = False
    exclude_nodes: tuple[str, ...] = ()
    exclude_op_types: tuple[str, ...] = ()
    model_type: str = "auto"
    """auto, transformer or generic (:class:`~mobilize.backends.onnxruntime.encoder.ModelType`)."""


@contextlib.contextmanager
def quiet(notes: list[str]) -> Iterator[None]:
    """Turn what ONNX Runtime's tools print (native stdout/stderr) and log into notes."""
    captured: list[str] = []
    try:
        with native_output(captured), _log_records(notes):
            yield
    finally:
        _add_notes(notes, [ln.split("] ", 1)[-1] for ln in captured if "onnxruntime" in ln])


@contextlib.contextmanager
def _log_records(notes: list[str]) -> Iterator[None]:
    records: list[logging.LogRecord] = []

    class Collect(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if "onnxruntime" in record.pathname:
                if record.levelno >= logging.WARNING:
                    records.append(record)
                return False
            return True

    loggers = [logging.getLogger(name) for name in _ORT_LOGGERS]
    collect = Collect()
    for logger in loggers:
        logger.addFilter(collect)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(collect)
        _add_notes(notes, [r.getMessage() for r in records])


def _add_notes(notes: list[str], messages: list[str]) -> None:
    """ONNX Runtime's lines as notes: the errors it is known to raise as a sentence (their raw text stays in the
    log, where ONNX Runtime writes it), the rest as it wrote them."""
    seen: list[str] = []
    for message in messages:
        text = message.strip().splitlines()[0] if message.strip() else ""
        said = explain(message)
        if said:
            with contextlib.suppress(OSError):  # the raw line to the log, as ONNX Runtime would have written it
                os.write(2, f"[W:onnxruntime:mobilize] {' '.join(message.split())}\n".encode(errors="replace"))
            text = said
        if text and text not in seen and "pre-process" not in text:
            seen.append(text)
    notes += [f"onnxruntime: {t}" for t in seen[:5]]


def pre_process(src: Path, dst: Path) -> list[str]:
    """``quant_pre_process``: symbolic shape inference, ORT basic optimizations, ONNX shape inference."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    notes: list[str] = []
    with third_party_failure("quant_pre_process") as failed, quiet(notes):
        quant_pre_process(str(src), str(dst))
    if not failed:
        return notes
    first = _first_line(failed.error)  # symbolic shape inference fails on some graphs; retry without it
    with translate_errors(UnsupportedModelError, "quant_pre_process failed", message=lambda exc: (
            f"quant_pre_process failed: {_first_line(exc)}"), hint="set quant_pre_process: false to quantize without it"), \
            quiet(notes):
        quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
    return notes + [f"quant_pre_process: symbolic shape inference failed ({first}); pre-processed without it"]


def constant_initializers(proto: Any) -> list[str]:
    """Make initializers listed as graph inputs (IR version 3 style) plain constants, as quantization needs.

    Returns the notes; ``proto`` is changed in place."""
    import onnx

    weights = {t.name for t in proto.graph.initializer}
    listed = [i for i in proto.graph.input if i.name in weights]
    if not listed:
        return []
    for inp in listed:
        proto.graph.input.remove(inp)
    proto.ir_version = max(proto.ir_version, onnx.helper.find_min_ir_version_for(list(proto.opset_import), True), 4)
    return [f"{len(listed)} weight(s) listed as graph inputs (IR version 3 style) are treated as constants"]


def convert_opset(proto: Any, target: int, hint: str) -> Any:
    import onnx

    what = f"cannot convert the model from opset {opset_of(proto)} to {target}"
    with translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what}: {_first_line(exc)}", hint=hint):
        return onnx.version_converter.convert_version(proto, target)


def op_types(registry: Iterable[str], exclude: Sequence[str]) -> list[str]:
    known = sorted(set(registry))
    for op in exclude:
        if op not in known:
            raise ConfigError(f"exclude_op_types: '{op}' is not an op type ONNX Runtime quantizes",
                              hint=did_you_mean(op, known, "choose from", n=1))
    return [op for op in known if op not in exclude]


def check_node_names(proto: Any, names: Sequence[str]) -> None:
    present = [n.name for n in proto.graph.node]
    for name in names:
        if name not in present:
            raise ConfigError(f"exclude_nodes: no node named '{name}' in the model (after pre-processing)",
                              hint=did_you_mean(name, present, None, otherwise="see the names with Netron"))


class BatchFeed:
    """A CalibrationDataReader over a stream of input tensors, checking each against the model's inputs."""

    def __init__(self, proto: Any, batches: Iterable[Sequence[Any]]):
        import onnx

        self.inputs = [(i.name, onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type),
                        [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                         for d in i.type.tensor_type.shape.dim]) for i in real_inputs(proto)]
        self._it = iter(batches)
        self._next: dict | None = None
        self.count = 0

    def has_more(self) -> bool:
        if self._next is None:
            tensors = next(self._it, None)
            self._next = None if tensors is None else self._to_feed(tensors)
        return self._next is not None

    def get_next(self) -> dict | None:
        if not self.has_more():
            return None
        item, self._next = self._next, None
        self.count += 1
        return item

    def chunk(self, size: int) -> "_Chunk":
        return _Chunk(self, size)

    def _to_feed(self, tensors: Sequence[Any]) -> dict:
        import numpy as np

        feed = {}
        for (name, dtype, dims), t in zip(self.inputs, tensors):
            arr = np.ascontiguousarray(t.detach().numpy() if hasattr(t, "detach") else np.asarray(t))
            if arr.ndim != len(dims) or any(d is not None and d != s for d, s in zip(dims, arr.shape)):
                from mobilize.core.inputs import shape_text

                raise ConfigError(f"calibration data for input '{name}' has shape {shape_text(arr.shape)} but the "
                                  f"model expects {shape_text([d or -1 for d in dims])}",
                                  hint="fix --input_dims or the data source")
            if arr.dtype != dtype:
                raise ConfigError(f"calibration data for input '{name}' is {arr.dtype} but the model takes {dtype}")
            feed[name] = arr
        return feed


class _Chunk:
    """The next ``size`` feeds of a BatchFeed, as a CalibrationDataReader."""

    def __init__(self, feed: BatchFeed, size: int):
        self.feed, self.left = feed, size

    def get_next(self) -> dict | None:
        if self.left <= 0:
            return None
        self.left -= 1
        return self.feed.get_next()


def calibrate(model_path: Path, feed: BatchFeed, method: str, ops: list[str], tmp: Path, batch: int) -> Any:
    """Run calibration a chunk of batches at a time; returns ORT TensorsData (ranges per tensor)."""
    from onnxruntime.quantization.calibrate import create_calibrator

    from mobilize.backends.onnxruntime.sessions import ort_session, session_options

    calibrator = create_calibrator(model_path, ops, augmented_model_path=str(tmp / "augmented.onnx"),
                                   calibrate_method=ort_calibration_method(method))
    # its session on one thread, so the ranges (and the file) are the same at every build on this machine
    calibrator.infer_session = ort_session(calibrator.augmented_model_path, session_options(1, level="disable"),
                                           providers=calibrator.execution_providers)  # as it makes it: no optimization
    per_chunk = max(1, CHUNK_SAMPLES // max(batch, 1))
    if not feed.has_more():
        raise ConfigError("no calibration data", hint="give --data with at least one sample")
    try:
        while feed.has_more():
            calibrator.collect_data(feed.chunk(per_chunk))
        return calibrator.compute_data()
    except ValueError as exc:
        if "Too many bins" not in str(exc) or method == "minmax":
            raise
        from mobilize.core.errors import UnsupportedByEngineError

        raise UnsupportedByEngineError(
            f"{method} calibration builds a histogram of every calibrated tensor, and numpy cannot bin one of "
            f"them: its values span a range too wide for finite bins (an attention mask's fill value, "
            f"float32's lowest -3.4e38, is the usual cause)",
            hint="minmax calibration takes this model (its masking nodes are then found and kept in float)") from exc


def ort_calibration_method(name: str) -> Any:
    from onnxruntime.quantization.calibrate import CalibrationMethod

    return {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
            "percentile": CalibrationMethod.Percentile}[name]


def quantize_static_qdq(src: Path, dst: Path, feed: BatchFeed, opts: StaticOptions, batch: int) -> list[str]:
    """Calibrate on ``feed``, then write a QDQ model (U8S8, per-channel weights) to ``dst``."""
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.calibrate import save_tensors_data
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    from mobilize.backends.onnxruntime.encoder import static_route

    notes = [U8S8_NOTE]
    proto = onnx.load(str(src))
    check_node_names(proto, opts.exclude_nodes)
    ops = op_types(set(QLinearOpsRegistry) | set(QDQRegistry), opts.exclude_op_types)
    named = name_nodes(proto)  # a node is kept in float by its name
    ops, route_exclude, route_notes = static_route(proto, ops, opts.model_type)
    tail, tail_notes = float_tail(proto, ops)
    notes += route_notes + tail_notes
    exclude = list(dict.fromkeys([*opts.exclude_nodes, *route_exclude, *tail]))
    with tempfile.TemporaryDirectory(prefix="mobilize-calib-") as tmp_dir, quiet(notes), _wrapped("static"):
        tmp = Path(tmp_dir)
        if named:
            src = tmp / "named.onnx"
            onnx.save(proto, str(src))
        ranges = calibrate(src, feed, opts.calibration, ops, tmp, batch)
        notes.append(f"calibrated {opts.calibration} ranges on {feed.count} batch(es) of {batch}")
        masked, mask_note = masking_nodes(proto, ranges)
        if masked:
            exclude = list(dict.fromkeys([*exclude, *masked]))
            notes.append(mask_note)
        cache = tmp / "ranges.json"
        save_tensors_data(ranges, cache)
        quantize_static(str(src), str(dst), None, quant_format=QuantFormat.QDQ, op_types_to_quantize=ops,
                        per_channel=opts.per_channel, reduce_range=opts.reduce_range,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        nodes_to_exclude=exclude or None,
                        calibrate_method=ort_calibration_method(opts.calibration), calibration_cache_path=str(cache))
    return notes


FLOAT_AT_OUTPUT = {"Softmax": "uint8 probabilities in [0, 1] round every probability below 1/510 to 0",
                   "Sigmoid": "uint8 values in [0, 1] round every score below 1/510 to 0"}
"""Ops whose int8 output is poor where it is the model's answer, kept in float when they end the graph."""
SHAPE_ONLY = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose"})
"""Ops that move values without computing, as onnx's opset converter puts around a Softmax (Flatten, Reshape)."""


def name_nodes(proto: Any) -> bool:
    """Give every unnamed node a unique name (``nodes_to_exclude`` takes names); True when one was named."""
    taken = {n.name for n in proto.graph.node}
    changed = False
    for i, node in enumerate(proto.graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in taken:
                name += "_"
            node.name, changed = name, True
            taken.add(name)
    return changed


def float_tail(proto: Any, ops: Sequence[str]) -> tuple[list[str], list[str]]:
    """The nodes that end the graph in an op of :data:`FLOAT_AT_OUTPUT` (a final Softmax, and the Flatten/Reshape
    after it), to keep in float, and the notes that say so."""
    producer = {out: node for node in proto.graph.node for out in node.output}
    keep, notes = [], []
    for output in proto.graph.output:
        node, chain = producer.get(output.name), []
        while node is not None and node.op_type in SHAPE_ONLY and node.input:
            chain.append(node.name)
            node = producer.get(node.input[0])
        if node is None or node.op_type not in FLOAT_AT_OUTPUT or node.op_type not in ops or node.name in keep:
            continue
        keep += [node.name, *chain]
        after = f" and the {', '.join(chain)} after it" if chain else ""
        notes.append(f"kept the output {node.op_type} ({node.name}){after} in float: {FLOAT_AT_OUTPUT[node.op_type]}")
    return keep, notes


MASK_MAGNITUDE = 1e4
"""A calibrated range reaching this far, on a path into a Softmax, is a masking constant, not an activation:
transformers' additive attention mask is (1 - mask) * finfo(float32).min (~-3.4e38; older models -1e4 or -1e9).
One uint8 step over such a range (~1e36) collapses every real value there to the same code."""
MASK_PATH_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Where", "Cast", "Reshape", "Expand", "Unsqueeze", "Squeeze",
                           "Concat", "Slice", "Transpose", "Identity", "Neg"})
"""Ops a mask goes through on its way into the attention's Softmax (built, broadcast, added to the scores).  A wide
range that reaches a Softmax only through a conv, a matmul or an activation is a large activation instead (a
ConvNet with unnormalized weights), which is quantized as usual."""


def _into_softmax(proto: Any, tensor: str, hops: int = 8) -> bool:
    """Whether ``tensor`` flows into a Softmax through mask-path ops only (within ``hops`` nodes)."""
    readers: dict[str, list[Any]] = {}
    for node in proto.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    frontier, seen = [tensor], {tensor}
    for _ in range(hops):
        nxt = []
        for name in frontier:
            for node in readers.get(name, []):
                if node.op_type == "Softmax":
                    return True
                if node.op_type in MASK_PATH_OPS:
                    nxt += [o for o in node.output if o not in seen]
                    seen.update(node.output)
        frontier = nxt
    return False


def masking_nodes(proto: Any, ranges: Any) -> tuple[list[str], str]:
    """The nodes that produce or read a tensor whose calibrated range holds a masking constant (kept in float,
    so the mask path computes as the float model does), and the note that says so."""
    import numpy as np

    wide = {}
    for name in ranges:
        try:
            low, high = ranges[name].range_value
        except AttributeError:  # a calibrator that keeps no min/max for this tensor
            continue
        reach = float(max(np.abs(np.asarray(low)).max(), np.abs(np.asarray(high)).max()))
        if reach >= MASK_MAGNITUDE and _into_softmax(proto, name):
            wide[name] = reach
    if not wide:
        return [], ""
    nodes = [n.name for n in proto.graph.node if n.name and (set(n.output) | set(n.input)) & set(wide)]
    shown = ", ".join(f"{t} (|x| up to {v:.3g})" for t, v in list(wide.items())[:4])
    more = f" and {len(wide) - 4} more" if len(wide) > 4 else ""
    return nodes, (f"masking constant: {shown}{more} reach past {MASK_MAGNITUDE:g} in calibration (an additive "
                   f"attention mask such as finfo.min), so one uint8 step there would be "
                   f"{max(wide.values()) / 255:.3g}; the {len(nodes)} node(s) that make or read them are kept in float: "
                   f"{', '.join(nodes[:6])}{' ...' if len(nodes) > 6 else ''}")


def quantize_dynamic_int8(src: Path, dst: Path, opts: StaticOptions) -> list[str]:
    """Dynamic int8 (per-tensor weights, activations quantized per run); notes when the model is conv-heavy."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    proto = onnx.load(str(src))
    check_node_names(proto, opts.exclude_nodes)
    ops = op_types(IntegerOpsRegistry, opts.exclude_op_types)
    counts = {op: sum(n.op_type == op for n in proto.graph.node) for op in ("Conv", "MatMul", "Gemm")}
    notes: list[str] = []
    # ConvInteger has no int8-weight CPU kernel: convolutions quantized dynamically need uint8 weights.
    weight_type = QuantType.QUInt8 if counts["Conv"] and "Conv" in ops else QuantType.QInt8
    if counts["Conv"] and "Conv" in ops and counts["Conv"] >= counts["MatMul"] + counts["Gemm"]:
        notes.append(f"warning: dynamic quantization on a conv-heavy model ({counts['Conv']} Conv vs "
                     f"{counts['MatMul'] + counts['Gemm']} MatMul/Gemm) is usually slower than float: ConvInteger "
                     "quantizes activations on every run and has no fused kernels; use quantize: static, or add Conv "
                     "to exclude_op_types to quantize only MatMul/Gemm")
    if weight_type == QuantType.QUInt8:
        notes.append("dynamic: uint8 weights (ONNX Runtime's ConvInteger CPU kernel takes uint8 weights only)")
    with quiet(notes), _wrapped("dynamic"):
        quantize_dynamic(str(src), str(dst), op_types_to_quantize=ops, per_channel=False,
                         reduce_range=opts.reduce_range, weight_type=weight_type,
                         nodes_to_exclude=list(opts.exclude_nodes) or None)
    integer = sum(n.op_type in _DYNAMIC_INTEGER_OPS for n in onnx.load(str(dst)).graph.node)
    if not integer:
        kinds = collections.Counter(n.op_type for n in proto.graph.node).most_common(4)
        notes.append("warning: dynamic quantization changed nothing: the quantizer found no op it takes "
                     f"({', '.join(sorted(ops))}) in this graph (most common ops: "
                     f"{', '.join(f'{k} x{v}' for k, v in kinds)}); the file computes in float, so its accuracy "
                     "reads as exact - use quantize: static for int8 here")
    return notes


_DYNAMIC_INTEGER_OPS = frozenset({"MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul",
                                  "DynamicQuantizeLSTM", "QAttention", "QEmbedLayerNormalization", "QGemm",
                                  "MatMulIntegerToFloat"})
"""What ONNX Runtime's dynamic quantizer writes where it quantized something."""


def to_ort_format(src: Path, dst: Path) -> list[str]:
    """Save as an ORT-format model for onnxruntime-mobile, as convert_onnx_models_to_ort does (fixed, all)."""
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mobilize-ort-") as tmp_dir:
        import onnx

        proto = onnx.load(str(src))
        fixed = constant_initializers(proto)  # else the .ort file asks for every weight as an input (RUN_FAIL)
        if fixed:
            src = Path(tmp_dir) / "constants.onnx"
            onnx.save(proto, str(src))
            notes += [f"{fixed[0]} before the ORT-format conversion, as onnxruntime's "
                      "remove_initializer_from_input.py does"]
        _save_ort(src, dst, notes)
    return notes + ["ORT format: graph optimized at level 'all' without the x64-only NCHWc layout, so the .ort "
                    "runs on ARM and x64 builds of onnxruntime(-mobile)"]


def _save_ort(src: Path, dst: Path, notes: list[str]) -> None:
    from mobilize.backends.onnxruntime.sessions import ort_session, session_options

    so = session_options(optimized_path=dst, config={"session.save_model_format": "ORT"})
    with translate_errors(UnsupportedModelError, "converting to ORT format failed",
                          message=lambda exc: f"converting to ORT format failed: {_first_line(exc)}",
                          hint="set ort_format: false to keep the .onnx file"), quiet(notes):
        ort_session(src, so, disabled_optimizers=["NchwcTransformer"])


def _wrapped(mode: str) -> contextlib.AbstractContextManager[None]:
    """ONNX Runtime's quantizer errors (ValueError, RuntimeError, ORT Fail ...) as one-line user errors."""
    what = f"ONNX Runtime {mode} quantization failed"
    return translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what}: {_first_line(exc)}",
                            hint="exclude the failing nodes or op types, or set quantize: none")


def _first_line(exc: BaseException) -> str:
    said = explain(str(exc))
    if said:
        return said
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
