"""Architecture lint: what in a model is unfriendly to mobile backends, where, what it costs, what to do.

Importing this package is cheap; ``lint()`` loads torch and the checks when called.

    >>> from mobilize.lint import LintConfig, lint
    >>> from mobilize.core.inputs import InputSpec
    >>> report = lint("zoo:toy_classifier", LintConfig(targets=(), time=False), input_specs=[InputSpec((1, 3, 32, 32))])
    >>> [f.module for f in report.findings if f.rule == "channels"][:2]
    ['features.3', 'features.9']
    >>> report.fired          # a warning fired: `mobilize lint --strict` exits 1
    True
"""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.lint.config import LintConfig, all_targets, parse_targets
from mobilize.lint.report import (
    Finding,
    LayerRow,
    LintReport,
    Profile,
    Rule,
    Severity,
    TargetSupport,
    UnsupportedOp,
    summary_dict,
)

__all__ = ["all_targets", "Finding", "LayerRow", "LintConfig", "LintReport", "Profile", "Rule", "Severity",
           "TargetSupport", "UnsupportedOp", "lint", "lint_section", "parse_targets", "summary_dict"]


def lint(reference_or_module: Any, config: LintConfig = LintConfig(), *, input_specs: Sequence[Any] | None = None,
         data: str | None = None, trust_pickle: bool = False, bound_args: dict[str, Any] | None = None) -> LintReport:
    """Run every check, the per-layer profile and the target probes on a model reference or ``nn.Module``
    (``bound_args``: non-tensor forward arguments, as ``--input sr=16000`` gives them)."""
    from mobilize.lint.core import lint as run

    return run(reference_or_module, config, input_specs=input_specs, data=data, trust_pickle=trust_pickle,
               bound_args=bound_args)


def lint_section(reference_or_module: Any, config: LintConfig = LintConfig(), *, top: int = 20,
                 **kwargs: Any) -> dict[str, Any]:
    """The lint summary and the per-layer profile as a JSON-able dict, for another report (``compare``) to embed;
    draw it with ``mobilize.lint.html.render_fragment``."""
    return summary_dict(lint(reference_or_module, config, **kwargs), top=top)
