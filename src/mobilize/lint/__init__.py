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

from mobilize.lint.config import LintConfig, all_targets, parse_targets
from mobilize.lint.report import Finding, LintReport, Rule, Severity, summary_dict
from mobilize.lint.support import LayerRow, Profile, TargetSupport, UnsupportedOp
from mobilize.lint.entry import lint, lint_section

__all__ = ["all_targets", "Finding", "LayerRow", "LintConfig", "LintReport", "Profile", "Rule", "Severity",
           "TargetSupport", "UnsupportedOp", "lint", "lint_section", "parse_targets", "summary_dict"]

