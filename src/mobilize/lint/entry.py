"""The lint verbs: cheap to import (torch and the checks load when ``lint`` is called)."""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.lint.config import LintConfig
from mobilize.lint.report import LintReport, summary_dict


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
