"""mobilize: turn a trained PyTorch model into the fastest artifact that still gives the right answers.

Importing this package is cheap: torch and the runtimes load when first used.
"""

from mobilize.api import bench, load
from mobilize.artifact import Artifact, Format
from mobilize.bench.harness import BenchConfig
from mobilize.errors import (
    AccuracyError,
    BackendUnavailableError,
    ConfigError,
    ExportError,
    InternalError,
    MobilizeError,
    UnsupportedModelError,
    UserError,
)
from mobilize.sources.inputs import InputSpec, parse_input_specs
from mobilize.sources.models import ModelSource, resolve_model

__all__ = [
    "AccuracyError", "Artifact", "BackendUnavailableError", "BenchConfig", "ConfigError", "ExportError",
    "Format", "InputSpec", "InternalError", "MobilizeError", "ModelSource", "UnsupportedModelError",
    "UserError", "bench", "load", "parse_input_specs", "resolve_model",
]
__version__ = "0.1.0"
