"""What ``mobilize lint`` found: findings (one per layer and rule), per-target support, the per-layer profile.

Every finding names its rule, the module path it is about, the numbers behind it and a concrete
fix; ``LintReport.to_json()`` is the ``--json`` file and ``summary_dict()`` the shorter section
``compare`` puts into its report.

    >>> f = Finding(Rule.CHANNELS, Severity.WARN, "features.3", "Conv2d has 33 output channels",
    ...             "use 32 (-1.2M MACs) or 40 (+8.6M MACs)", {"channels": 33})
    >>> f.headline()
    'warn  channels  features.3: Conv2d has 33 output channels'
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from typing import Any

from mobilize.lint.support import Profile, TargetSupport
from mobilize.report.json_report import SCHEMA_VERSION  # one version for every JSON mobilize writes


class Rule(enum.StrEnum):
    """The checks; each finding names one."""

    CHANNELS = "channels"
    """Channel counts not divisible by the vector width (8)."""
    CONV_BN = "conv-bn"
    """A BatchNorm that fusion cannot fold into the conv before it."""
    ACTIVATION = "activation"
    """Activations other than ReLU/ReLU6/Hardswish/Hardsigmoid that do not fuse or quantize well."""
    DEPTHWISE = "depthwise"
    """A standard convolution that would cost far fewer MACs as depthwise-separable."""
    TRAINING_MODE = "training-mode"
    """Modules left in training mode (BatchNorm uses batch statistics, dropout is active)."""
    TRAINING_ONLY = "training-only"
    """Dropout, observers and fake-quant modules: training machinery left in an inference model."""
    REQUIRES_GRAD = "requires-grad"
    """Parameters that require grad (autograd bookkeeping at inference unless run under no_grad)."""
    FLOAT_FUNCTIONAL = "float-functional"
    """Tensor-tensor ``x + y`` / ``x * y`` that eager quantization needs as ``FloatFunctional``."""
    TARGET_SUPPORT = "target-support"
    """An op a target backend does not take (found by really converting/partitioning)."""


class Severity(enum.StrEnum):
    WARN = "warn"
    """Costs speed or accuracy on a target, or blocks a path; ``--strict`` fails on these."""
    INFO = "info"
    """Worth knowing, usually harmless for the artifacts mobilize writes; ``--strict`` ignores these."""


@dataclasses.dataclass
class Finding:
    rule: Rule
    severity: Severity
    module: str
    """Module path inside the model (``features.3.conv.0``); ``""`` is the model itself."""
    message: str
    fix: str
    numbers: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The figures behind the finding, units in the names (``macs``, ``macs_saved``, ``int8_sqnr_db``)."""
    target: str | None = None
    """The target backend a ``target-support`` finding is about."""
    location: str | None = None
    """The model's source line (``net.py:12``) where the graph knows it."""

    @property
    def where(self) -> str:
        return self.module or "(model)"

    def headline(self) -> str:
        return f"{self.severity}  {self.rule}  {self.where}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["rule"], data["severity"] = str(self.rule), str(self.severity)
        return data


@dataclasses.dataclass
class LintReport:
    model: str
    findings: list[Finding]
    targets: list[TargetSupport]
    profile: Profile | None
    notes: list[str] = dataclasses.field(default_factory=list)
    timings_s: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.WARN]

    @property
    def fired(self) -> bool:
        """True when any warn-level check fired: what ``--strict`` turns into exit code 1."""
        return bool(self.warnings)

    def rules(self, severity: Severity | None = None) -> set[str]:
        return {str(f.rule) for f in self.findings if severity is None or f.severity == severity}

    def by_rule(self) -> dict[str, int]:
        return dict(collections.Counter(str(f.rule) for f in self.findings))

    def target(self, name: str) -> TargetSupport | None:
        return next((t for t in self.targets if t.target == name), None)

    def summary(self) -> str:
        warn, info = len(self.warnings), len(self.findings) - len(self.warnings)
        rules = ", ".join(f"{r} x{n}" for r, n in sorted(self.by_rule().items())) or "none"
        targets = "; ".join(f"{t.target} {t.status}" + (f" ({t.partitions} partition(s))" if t.partitions is not None
                                                          else "") for t in self.targets)
        return f"{warn} warning(s), {info} info ({rules})" + (f"; targets: {targets}" if targets else "")

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "model": self.model, "summary": self.summary(),
                "fired": self.fired, "counts": {"warn": len(self.warnings), "info": len(self.findings) - len(self.warnings),
                                                "by_rule": self.by_rule()},
                "findings": [f.to_json() for f in self.findings], "targets": [t.to_json() for t in self.targets],
                "profile": self.profile.to_json() if self.profile else None, "notes": list(self.notes),
                "timings_s": dict(self.timings_s)}


def summary_dict(report: LintReport, top: int = 20) -> dict[str, Any]:
    """The lint summary and the per-layer profile as a JSON-able dict, for another report to embed
    (``mobilize compare``); ``mobilize.lint.html.render_fragment`` draws it."""
    profile = report.profile.to_json() if report.profile else None
    if profile is not None:
        rows = profile["rows"]
        keep = rows[:top]
        if report.profile.total_time_ms is not None:  # and the rows that take the most time, if not among them
            by_time = sorted(rows[top:], key=lambda r: -(r["time_share"] or 0.0))[:max(1, top // 4)]
            keep += [r for r in by_time if (r["time_share"] or 0.0) > 0]
        profile["rows_omitted"] = len(rows) - len(keep)
        profile["rows"] = keep
    return {"schema_version": SCHEMA_VERSION, "model": report.model, "summary": report.summary(),
            "fired": report.fired, "by_rule": report.by_rule(),
            "findings": [{k: v for k, v in f.to_json().items() if k in ("rule", "severity", "module", "message", "fix",
                                                                          "target")} for f in report.findings],
            "targets": [{"target": t.target, "status": t.status, "partitions": t.partitions,
                         "ops_total": t.ops_total, "ops_supported": t.ops_supported, "summary": t.summary}
                        for t in report.targets],
            "profile": profile, "notes": list(report.notes)}
