"""mobilize: turn a trained PyTorch model into the fastest artifact that still gives the right answers.

Importing this package is cheap: torch and the runtimes load when first used.
"""

from mobilize.accuracy.verify import Kind, Policy, Verdict
from mobilize.compare.runner import CompareConfig  # before the api: the function `compare` must win the name
from mobilize.api import bench, compare, load, optimize
from mobilize.lint import LintConfig, lint  # noqa: E402  (after the subpackage import: the function wins the name)
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
    "AccuracyError", "Artifact", "BackendUnavailableError", "BenchConfig", "CompareConfig", "ConfigError",
    "ExportError", "Format", "InputSpec", "InternalError", "Kind", "LintConfig", "MobilizeError", "ModelSource", "Policy",
    "UnsupportedModelError", "UserError", "Verdict", "bench", "compare", "lint", "load", "optimize", "parse_input_specs",
    "resolve_model",
]
__version__ = "0.1.0"
