"""Where a graph node came from: op names and the user's own source line, for any torch.export-based lowering.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def op_name(target: Any) -> str:
    """``aten.convolution`` for an EdgeOpOverload, OpOverload or ``aten::convolution.out`` string."""
    if isinstance(target, str):
        return target.split(".")[0].replace("::", ".")
    schema = getattr(target, "_schema", None) or getattr(getattr(target, "_op", None), "_schema", None)
    if schema is not None:
        return schema.name.replace("::", ".")
    return getattr(target, "__name__", str(target))


def source_location(node: Any) -> dict[str, Any] | None:
    """The user's source line for a graph node: the innermost stack frame outside torch itself."""
    trace = (getattr(node, "meta", None) or {}).get("stack_trace") or ""
    return frame_location(trace)


def frame_location(text: str) -> dict[str, Any] | None:
    frames = _FRAME.findall(text)
    if not frames:
        return None
    user = [f for f in frames if not _is_library_file(f[0])]
    file, line, func, code = (user or frames)[-1]
    return {"location": f"{Path(file).name}:{line}", "file": file, "line": int(line), "function": func,
            "code": code.strip()}


def _is_library_file(file: str) -> bool:
    """A frame of torch or of an engine's own packages (``Backend.packages``), installed in site-packages."""
    from mobilize.core.backend import engine_packages

    parts = Path(file).parts
    return "site-packages" in parts and bool({"torch", *engine_packages()} & set(parts))
