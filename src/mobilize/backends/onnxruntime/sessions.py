"""The one place ONNX Runtime sessions are built: options from keywords, a model from a path, bytes or a ModelProto.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from mobilize.core.errors import ConfigError
from mobilize.core.registry import did_you_mean

CPU = "CPUExecutionProvider"
LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "layout": "ORT_ENABLE_LAYOUT", "all": "ORT_ENABLE_ALL"}
"""mobilize's names for ONNX Runtime's graph optimization levels."""


def session_options(threads: int | None = None, *, level: str = "all", optimized_path: str | Path | None = None,
                    profile_prefix: str | Path | None = None, config: dict[str, str] | None = None) -> Any:
    """SessionOptions: ``threads`` intra-op threads (and one inter-op thread), ``level`` of graph optimization,
    the optimized graph saved at ``optimized_path``, profiling into ``profile_prefix``; ONNX Runtime's own log
    quiet (errors reach the user as exceptions)."""
    import onnxruntime as ort

    if level not in LEVELS:
        raise ConfigError(f"unknown graph optimization level '{level}'", hint=did_you_mean(level, list(LEVELS)))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
    opts.log_severity_level = 3
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    if optimized_path is not None:
        opts.optimized_model_filepath = str(optimized_path)
    if profile_prefix is not None:
        opts.enable_profiling = True
        opts.profile_file_prefix = str(profile_prefix)
    for key, value in (config or {}).items():
        opts.add_session_config_entry(key, value)
    return opts


def ort_session(model: Any, options: Any = None, providers: Sequence[str] = (CPU,), **kwargs: Any) -> Any:
    """An InferenceSession on ``model`` (a path, serialized bytes or a ModelProto)."""
    import onnxruntime as ort

    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    elif isinstance(model, Path):
        model = str(model)
    return ort.InferenceSession(model, options if options is not None else session_options(),
                                providers=list(providers), **kwargs)
