"""Graph capture with ``torch.export``, its failures turned into one-line ExportErrors labelled with their stage.

A raw ``torch.export`` failure is pages of graph dump; users need the stage, the op and their
own source line:
"""

from __future__ import annotations

import contextlib
import re
import warnings
from typing import Any, Sequence

from mobilize.core.errors import ExportError, translate_errors
from mobilize.lowering.graph import frame_location, op_name, source_location

_NOT_CORE = re.compile(r"Operator (?:torch\._ops\.)?([\w.]+?)(?:\.default)? is not in Core ATen opset")


def capture(module: Any, inputs: Sequence[Any], dynamic_shapes: Any = None) -> Any:
    """``torch.export.export`` → ExportedProgram (stage ``export``)."""
    import torch

    with translate_errors(lambda exc: stage_error("export", exc), "torch.export"), quiet_export():
        return torch.export.export(module, tuple(inputs), dynamic_shapes=dynamic_shapes)


def stage_error(stage: str, exc: BaseException, program: Any = None) -> ExportError:
    """One concise line: what failed, on which op, at which user source line."""
    text = str(exc).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__).split(" (unhinted")[0]
    where = frame_location(text)
    at = f" at {where['location']} (`{where['code']}`)" if where else ""
    if "DataDependent" in type(exc).__name__ or "data-dependent" in text or "Dynamic control flow" in text:
        return ExportError(f"data-dependent control flow{at}: torch.export cannot branch on tensor values ({first})",
                           stage=stage, hint="rewrite the branch with torch.where or torch.cond, or move it out of forward")
    match = _NOT_CORE.search(text)
    if match:
        op = match.group(1)
        where_op = locate_op(program, op) if program is not None else ""
        return ExportError(f"{op} is not a core ATen op and no delegate took it{where_op}", stage=stage,
                           hint="replace that op in the model (ExecuTorch has no kernel for it)")
    return ExportError(f"{type(exc).__name__}: {first}{at}", stage=stage)


def locate_op(program: Any, name: str) -> str:
    """`` (from model.py:12)`` for the first node running op ``name``, if the graph knows where it came from."""
    graph = getattr(program, "graph", None)
    for node in graph.nodes if graph is not None else ():
        if node.op == "call_function" and op_name(node.target) == name:
            loc = source_location(node)
            return f" (from {loc['location']}: `{loc['code']}`)" if loc else ""
    return ""


@contextlib.contextmanager
def quiet_export():
    """torch.export and ExecuTorch warn about internals users cannot act on; the errors carry what matters."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
