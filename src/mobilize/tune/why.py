""""Why is int8 not faster": asked of the engine that owns the files' format (``Backend.why_slow``: ONNX Runtime's
per-operator profile, ExecuTorch's ETDump delegate split), never by the engine's name here.  Each analysis returns
a :class:`mobilize.profile.diagnosis.Diagnosis`; tune prints its lines and writes its JSON into the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from mobilize.profile.diagnosis import Diagnosis

PROFILE_RUNS = 50


def why_not_faster(fp32: Path, int8: Path, inputs: Sequence[Any], runs: int = PROFILE_RUNS) -> Diagnosis | None:
    """Where an int8 file's time goes against its fp32 twin of the same format, by the analysis of the engine that
    owns the format; None when that engine has none (or the two files are of different formats)."""
    from mobilize.core.artifact import format_for_path
    from mobilize.core.backend import why_slow_for

    fmt = format_for_path(fp32)
    analysis = why_slow_for(fmt) if format_for_path(int8) == fmt else None
    return None if analysis is None else analysis(Path(fp32), Path(int8), inputs, runs)
