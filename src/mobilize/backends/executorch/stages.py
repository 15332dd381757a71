"""The three ExecuTorch stages — export, lower, serialize — with failures turned into one-line ExportErrors.

A raw ``torch.export`` failure is pages of graph dump; users need the stage, the op and their
own source line:
"""

from __future__ import annotations

import re
from typing import Any

from mobilize.core.errors import ExportError, translate_errors
from mobilize.lowering.graph import op_name
from mobilize.lowering.torch_export import locate_op, quiet_export, stage_error



def lower(program: Any, partitioners: list) -> Any:
    """``to_edge_transform_and_lower`` → EdgeProgramManager (stage ``lower``)."""
    from executorch.exir import to_edge_transform_and_lower

    def failed(exc: Exception) -> ExportError:
        text = pass_failure(exc)
        return ExportError(text, stage="lower", hint=_PASS_HINT) if text else stage_error("lower", exc, program)

    with translate_errors(failed, "to_edge_transform_and_lower"), quiet_export():
        return to_edge_transform_and_lower(program, partitioner=partitioners)


_PASS_FAILED = re.compile(r"error occurred when running the '(\w+)' pass")
_NHWC = ("Attempting to convert non-NHWC compatible node to NHWC",
         "an op XNNPACK runs channels-last (conv, pooling, PReLU, mean) got an input that is not 4-D")
_PASS_HINT = ("the delegate's bug, not the model's: the executorch exporter's option delegate: none exports without "
              "XNNPACK; report it upstream with --debug's traceback")


def pass_failure(exc: BaseException) -> str | None:
    """One line for a delegate graph pass that raised inside lowering: the pass, the error it raised and, where
    known, what in the model triggers it (the pass manager's own message names only the pass)."""
    match = _PASS_FAILED.search(str(exc))
    if not match:
        return None
    cause = exc.__cause__ or exc.__context__
    text = str(cause).strip().splitlines()[0] if cause is not None and str(cause).strip() else ""
    why = f": {type(cause).__name__}: {text}" if cause is not None else ""
    if text.startswith(_NHWC[0]):
        why += f" ({_NHWC[1]})"
    return f"ExecuTorch's {match.group(1)} failed while lowering to XNNPACK{why}"


def serialize(edge: Any, registered_ops: set[str] | None = None) -> Any:
    """``to_executorch`` → ExecutorchProgramManager (stage ``serialize``); fails if a portable op
    has no kernel in the runtime (the .pte would not load)."""
    with translate_errors(lambda exc: stage_error("serialize", exc, edge.exported_program()), "to_executorch"), \
            quiet_export():
        manager = edge.to_executorch()
    if registered_ops is not None:
        from mobilize.backends.executorch.pte import read_program

        missing = [op for op in read_program(manager.buffer).operators if op not in registered_ops]
        if missing:
            where = locate_op(edge.exported_program(), op_name(missing[0]))
            raise ExportError(
                f"no ExecuTorch kernel for {', '.join(missing)}{where}: the .pte would not load",
                stage="serialize", hint="replace that op in the model, or build a runtime that registers its kernel")
    return manager


