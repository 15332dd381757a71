"""mobilize: turn a trained PyTorch model into the fastest artifact that still gives the right answers.

Importing this package is cheap and loads nothing else: each public name below is imported from its module
when first used (PEP 562), so ``import mobilize.core.errors`` never loads the command-line face.
"""

import sys
import types

TYPE_CHECKING = False  # not typing's: the CLI installs its interrupt handler after this import, so it stays small

_PUBLIC = {
    "Kind": "mobilize.accuracy.verify", "Policy": "mobilize.accuracy.verify", "Verdict": "mobilize.accuracy.verify",
    "CompareConfig": "mobilize.compare.config",
    "bench": "mobilize.api", "compare": "mobilize.api", "load": "mobilize.api", "optimize": "mobilize.api",
    "tune": "mobilize.api", "verify": "mobilize.api", "generate": "mobilize.api",
    "lint": "mobilize.lint", "LintConfig": "mobilize.lint",
    "Artifact": "mobilize.core.artifact", "Format": "mobilize.core.artifact",
    "BenchConfig": "mobilize.bench.harness",
    "AccuracyError": "mobilize.core.errors", "BackendUnavailableError": "mobilize.core.errors",
    "ConfigError": "mobilize.core.errors", "ExportError": "mobilize.core.errors",
    "InternalError": "mobilize.core.errors", "MobilizeError": "mobilize.core.errors",
    "UnsupportedModelError": "mobilize.core.errors", "UserError": "mobilize.core.errors",
    "InputSpec": "mobilize.core.inputs", "parse_input_specs": "mobilize.core.inputs",
    "ModelSource": "mobilize.sources.models", "resolve_model": "mobilize.sources.models",
}
__all__ = sorted(_PUBLIC)
__version__ = "0.2.0"

if TYPE_CHECKING:  # pragma: no cover
    from mobilize.accuracy.verify import Kind, Policy, Verdict  # noqa: F401


def __getattr__(name: str):
    import importlib

    if name not in _PUBLIC:
        raise AttributeError(f"module 'mobilize' has no attribute '{name}'")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


class _Face(types.ModuleType):
    """``mobilize.compare``, ``bench``, ``lint`` and ``tune`` are functions that share their names with
    subpackages; importing a subpackage must not replace the function (Python sets the parent's attribute)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _PUBLIC and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Face
