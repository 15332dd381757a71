"""PyTorch → ONNX (dynamo exporter, TorchScript fallback) and the checks every ONNX file goes through.

Private helpers of the ``onnx`` exporter.  ``torch_to_onnx`` returns a checked, shape-inferred
``ModelProto`` and the notes to record; ``check_onnx_model`` raises a one-line user error that
names the failing node or input.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path
from typing import Any, Sequence

from mobilize.core.errors import ConfigError, UnsupportedModelError, third_party_failure, translate_errors

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# torch.onnx log lines about the exporter's own environment, not about the user's model.
_UNRELATED_LOGS = ("torchvision is not installed",)
# Warning categories from the exporters worth a note (the rest is deprecation chatter).
_NOTED_WARNINGS = ("TracerWarning",)


def input_names(count: int) -> list[str]:
    return ["input"] if count == 1 else [f"input_{i}" for i in range(count)]


def torch_to_onnx(module: Any, inputs: Sequence[Any], *, opset: int | None, dynamic_batch: bool,
                  exporter: str) -> tuple[Any, list[str]]:
    """Export with ``dynamo=True``; where that fails and ``exporter`` is auto, with ``dynamo=False``."""
    notes: list[str] = []
    errors: list[str] = []
    for dynamo in {"auto": (True, False), "dynamo": (True,), "torchscript": (False,)}[exporter]:
        which = "dynamo" if dynamo else "TorchScript"
        with third_party_failure(f"the {which} ONNX exporter") as failed:
            proto, caught = _export_once(module, inputs, opset, dynamic_batch, dynamo)
        if failed:  # the exporters raise many types; the reason goes in the note/error
            errors.append(f"{which} exporter: {_first_line(_root_cause(failed.error))}")
            continue
        if opset is not None and opset_of(proto) != opset:
            errors.append(f"{which} exporter: wrote opset {opset_of(proto)}, could not convert it to opset {opset}")
            continue
        if errors:
            notes.append(f"the dynamo exporter failed ({errors[0].split(': ', 1)[1]}); "
                         "exported with the TorchScript exporter (dynamo=False) instead")
        notes += caught
        return finish_model(proto, "the exported model"), notes
    raise UnsupportedModelError("ONNX export failed: " + "; ".join(errors),
                                hint="try exporter: torchscript, or another opset (dynamo writes 18 or newer)")


def _export_once(module: Any, inputs: Sequence[Any], opset: int | None, dynamic_batch: bool,
                 dynamo: bool) -> tuple[Any, list[str]]:
    import tempfile

    import onnx
    import torch

    names = input_names(len(inputs))
    kwargs: dict[str, Any] = {"input_names": names, "verbose": False}
    if opset is not None:
        kwargs["opset_version"] = opset
    if dynamo and dynamic_batch:
        batch = torch.export.Dim("batch", min=1, max=4096)
        kwargs["dynamic_shapes"] = tuple({0: batch} for _ in inputs)
    elif dynamic_batch:
        kwargs["dynamic_axes"] = {n: {0: "batch"} for n in names}
    logged: list[str] = []
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()), \
            _exporter_logs(logged), torch.no_grad():
        warnings.simplefilter("always")
        if dynamo:
            program = torch.onnx.export(module, tuple(inputs), dynamo=True, **kwargs)
            proto = program.model_proto
        else:
            with tempfile.TemporaryDirectory(prefix="mobilize-onnx-") as tmp, native_output([]):
                path = Path(tmp) / "model.onnx"  # on failure it prints its IR graph natively: the error says why
                torch.onnx.export(module, tuple(inputs), str(path), dynamo=False, **kwargs)
                proto = onnx.load(str(path))
    notes = sorted({f"exporter warning: {str(w.message).strip().splitlines()[0]}" for w in caught
                    if w.category.__name__ in _NOTED_WARNINGS})
    return proto, notes + sorted(set(logged))


@contextlib.contextmanager
def _exporter_logs(notes: list[str]):
    """torch.onnx and onnxscript log progress and tracebacks to stderr: keep their warnings as notes instead."""
    import logging

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage().strip()
            if record.levelno >= logging.WARNING and text and not any(t in text for t in _UNRELATED_LOGS):
                notes.append(f"exporter: {text.splitlines()[0]}")

    saved = []
    for name in ("torch.onnx", "onnxscript"):
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers[:] = [Collect()]
        logger.propagate = False
    try:
        yield
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers[:] = handlers
            logger.propagate = propagate


@contextlib.contextmanager
def native_output(lines: list[str]):
    """Redirect file descriptors 1 and 2 (C++ logging, tool prints) into ``lines`` while inside."""
    import os
    import sys
    import tempfile

    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            lines += _ANSI.sub("", sink.read().decode("utf-8", errors="replace")).splitlines()


def finish_model(proto: Any, what: str) -> Any:
    """onnx.checker, then shape inference (so value_info carries every intermediate shape)."""
    import onnx

    check_onnx_model(proto, what)
    with translate_errors(UnsupportedModelError, f"{what} fails ONNX shape inference",  # InferenceError and friends
                          message=lambda exc: f"{what} fails ONNX shape inference: {_first_line(exc)}",
                          hint="its types or shapes are inconsistent; try exporter: torchscript"):
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)


def check_onnx_model(proto: Any, what: str) -> None:
    """Raise UnsupportedModelError naming the node if ``proto`` fails ``onnx.checker``."""
    import onnx

    try:
        onnx.checker.check_model(proto)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise UnsupportedModelError(f"{what} fails the ONNX checker: {_checker_message(exc)}",
                                    hint="fix or re-export the model") from exc


def check_static_inputs(proto: Any, specs: Sequence[Any]) -> None:
    """Every graph input needs a known shape (from the model or --input_dims) that fits the model."""
    graph_inputs = real_inputs(proto)
    if len(specs) != len(graph_inputs):
        raise ConfigError(f"the model has {len(graph_inputs)} input(s) "
                          f"({', '.join(i.name for i in graph_inputs)}) but {len(specs)} input spec(s) were given",
                          hint="give one --input_dims group per input, separated by ';'")
    for inp, spec in zip(graph_inputs, specs):
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in inp.type.tensor_type.shape.dim]
        if any(d <= 0 for d in spec.shape):
            raise ConfigError(f"input '{inp.name}' has dynamic dimensions {dims} and no --input_dims",
                              hint='give --input_dims, e.g. --input_dims "1,3,224,224"')
        fixed = [d if isinstance(d, int) and d > 0 else None for d in dims]
        if len(fixed) != len(spec.shape) or any(f is not None and f != s for f, s in zip(fixed, spec.shape)):
            from mobilize.core.inputs import shape_text

            raise ConfigError(f"input '{inp.name}' is {shape_text([d if isinstance(d, int) else -1 for d in dims])} "
                              f"in the model, but the input spec is {shape_text(spec.shape)}", hint="fix --input_dims")


def real_inputs(proto: Any) -> list:
    """Graph inputs that are not initializers (old IR versions list weights as inputs too)."""
    weights = {t.name for t in proto.graph.initializer}
    return [i for i in proto.graph.input if i.name not in weights]


def opset_of(proto: Any) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def _root_cause(exc: BaseException) -> BaseException:
    """torch.onnx wraps the real reason ("Could not guard on data-dependent expression ...") in its own error."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def _checker_message(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " ".join(lines[:3]) if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in _ANSI.sub("", str(exc)).strip().splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
