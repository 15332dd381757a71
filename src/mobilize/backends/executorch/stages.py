"""The three ExecuTorch stages — export, lower, serialize — with failures turned into one-line ExportErrors.

A raw ``torch.export`` failure is pages of graph dump; users need the stage, the op and their
own source line:
"""

from __future__ import annotations

from typing import Any

from mobilize.errors import ExportError
from mobilize.lowering.graph import op_name
from mobilize.lowering.torch_export import locate_op, quiet_export, stage_error



def lower(program: Any, partitioners: list) -> Any:
    """``to_edge_transform_and_lower`` → EdgeProgramManager (stage ``lower``)."""
    from executorch.exir import to_edge_transform_and_lower

    try:
        with quiet_export():
            return to_edge_transform_and_lower(program, partitioner=partitioners)
    except Exception as exc:
        raise stage_error("lower", exc, program) from exc


def serialize(edge: Any, registered_ops: set[str] | None = None) -> Any:
    """``to_executorch`` → ExecutorchProgramManager (stage ``serialize``); fails if a portable op
    has no kernel in the runtime (the .pte would not load)."""
    try:
        with quiet_export():
            manager = edge.to_executorch()
    except Exception as exc:
        raise stage_error("serialize", exc, edge.exported_program()) from exc
    if registered_ops is not None:
        from mobilize.backends.executorch.pte import read_program

        missing = [op for op in read_program(manager.buffer).operators if op not in registered_ops]
        if missing:
            where = locate_op(edge.exported_program(), op_name(missing[0]))
            raise ExportError(
                f"no ExecuTorch kernel for {', '.join(missing)}{where}: the .pte would not load",
                stage="serialize", hint="replace that op in the model, or build a runtime that registers its kernel")
    return manager


