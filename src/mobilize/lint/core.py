"""``lint(model, config)``: run every check family, the per-layer profile and the target probes.

    >>> from mobilize.lint import LintConfig, lint
    >>> report = lint("zoo:toy_classifier", LintConfig(targets=(), time=False), input_specs=[InputSpec((1, 3, 32, 32))])
    >>> sorted(report.rules())
    ['channels', 'requires-grad']
"""

from __future__ import annotations

import copy
import time
from typing import Any, Sequence

from mobilize.core.deadline import time_limit
from mobilize.core.errors import ConfigError, UserError
from mobilize.lint import activations, batchnorm, channels, depthwise, residual, training
from mobilize.lint.config import LintConfig
from mobilize.lint.report import Finding, LintReport, Rule, Severity
from mobilize.lint.support import TargetSupport
from mobilize.lint.targets import probe_module
from mobilize.core.runtime_options import one_thread
from mobilize.core.inputs import InputSpec

CHECKS = (channels.check, batchnorm.check, activations.check, depthwise.check, training.check, residual.check)
"""The check families, in report order."""
_RULE_ORDER = {r: i for i, r in enumerate(Rule)}


def lint(model: Any, config: LintConfig = LintConfig(), *, input_specs: Sequence[InputSpec] | None = None,
         data: str | None = None, trust_pickle: bool = False, bound_args: dict[str, Any] | None = None) -> LintReport:
    """Check a model (reference or ``nn.Module``) for what is unfriendly to mobile backends; never changes it.
    ``bound_args``: non-tensor forward arguments of a model reference (``--input sr=16000``)."""
    with one_thread():
        return _lint(model, config, input_specs, data, trust_pickle, bound_args)


def _lint(model: Any, config: LintConfig, input_specs, data: str | None, trust_pickle: bool,
          bound_args: dict[str, Any] | None = None) -> LintReport:
    import torch

    from mobilize.lint.graph import ModelView
    from mobilize.lint.profile import build_profile
    from mobilize.lint.targets import ProbeInput, probe
    from mobilize.core.inputs import make_random_inputs

    timings: dict[str, float] = {}
    start = time.perf_counter()
    what = type(model).__name__ if isinstance(model, torch.nn.Module) else str(model)
    with time_limit(config.build_timeout_s, lambda: UserError(
            f"building the model {what} took longer than lint's {config.build_timeout_s:g} s limit",
            hint="raise the limit (LintConfig.build_timeout_s), or build a smaller model")):
        module, name, specs = _resolve(model, input_specs, trust_pickle, bound_args)
    if isinstance(model, torch.nn.Module):
        module = copy.deepcopy(module)  # the caller's model: forward passes in training mode would move BN statistics
    example = make_random_inputs(specs, config.seed)
    samples = _samples(data, specs, config) if data else None
    with torch.no_grad():
        view = ModelView.build(module, example, config, samples, data)
    timings["graph_s"] = time.perf_counter() - start
    findings: list[Finding] = []
    for check in CHECKS:
        t0 = time.perf_counter()
        findings += check(view)
        timings[f"{check.__module__.rsplit('.', 1)[-1]}_s"] = time.perf_counter() - t0
    profile = build_profile(view)
    notes = list(view.notes)
    runnable = module
    if any(m.training for m in module.modules()):
        runnable = copy.deepcopy(module).eval()
        notes.append("the model has modules in training mode: targets and timing used an eval-mode copy")
    subject = ProbeInput(runnable, example, config)
    targets: list[TargetSupport] = []
    for target in config.targets:
        result = probe(target, subject)
        timings[f"{target}_s"] = result.seconds
        targets.append(result)
        findings += _target_findings(result)
    if config.time or (config.time is None and data):
        t0 = time.perf_counter()
        notes += _measure_time(profile, subject, _batches(samples or [], specs), data or "")
        timings["time_s"] = time.perf_counter() - t0
    order = {path: i for i, path in enumerate(view.modules)}
    findings.sort(key=lambda f: (f.severity != Severity.WARN, _RULE_ORDER[f.rule], f.target or "",
                                 order.get(f.module, len(order))))
    timings["total_s"] = time.perf_counter() - start
    return LintReport(name, findings, targets, profile, notes, {k: round(v, 3) for k, v in timings.items()})


def _measure_time(profile: Any, subject: Any, batches: list[list], data: str) -> list[str]:
    """Per-layer time on the engine that offers ``lint_timing`` (ONNX Runtime today); a note instead when it cannot
    be measured (the rest of the lint stands)."""
    from mobilize.core.backend import tool_anywhere
    from mobilize.core.errors import MobilizeError
    from mobilize.core.packages import install_hint, missing

    found = tool_anywhere("lint_timing")
    if found is None:
        return ["per-layer time not measured: no engine here times layers (lint_timing)"]
    engine, measure_time = found
    packages = [p for entry in engine.lint_targets.values() for p in engine.load(entry).PACKAGES]
    gone = missing(packages)
    if gone:
        return [f"per-layer time not measured: {', '.join(gone)} not installed ({install_hint(gone)})"]
    try:
        profile.timed_on = measure_time(profile, subject, batches, data)
    except MobilizeError as exc:  # the model does not export to ONNX or load in ONNX Runtime: said, not fatal
        return [f"per-layer time not measured: {exc}"]
    return []


def _resolve(model: Any, input_specs, trust_pickle: bool, bound_args=None) -> tuple[Any, str, list[InputSpec]]:
    import torch

    from mobilize.sources.models import resolve_model

    if isinstance(model, torch.nn.Module):
        specs = list(input_specs or getattr(model, "input_specs", None) or [])
        name = type(model).__name__
    else:
        source = resolve_model(model, trust_pickle=trust_pickle, bound_args=bound_args)  # a str or a parsed ModelRef
        if not hasattr(source, "module"):
            raise ConfigError(f"lint checks a PyTorch model; {model} is an exported file ({source.format})",
                              hint="point at the model's code (zoo:NAME, file.py:Class, pkg.mod:factory)")
        model, name, specs = source.module, str(source.reference), list(input_specs or source.input_specs)
    if not specs:
        raise ConfigError("the model's input shape is unknown", hint='give --input_dims, e.g. "1,3,224,224"')
    specs = [s if isinstance(s, InputSpec) else InputSpec(tuple(s)) for s in specs]
    return model, name, specs


def _samples(data: str, specs: list[InputSpec], config: LintConfig) -> list[list]:
    from mobilize.sources.data import open_data

    source = open_data(data)
    if source.inputs_per_sample != len(specs):
        raise ConfigError(f"data source '{data}' feeds {source.inputs_per_sample} input(s); the model takes {len(specs)}")
    return source.sample_lists(specs, max(config.int8_samples, 1))


def _batches(samples: list[list], specs: list[InputSpec]) -> list[list]:
    """Samples (batch of one each) grouped to the model's batch size, for the exported model's fixed shapes."""
    import torch

    batch = specs[0].shape[0] if specs and specs[0].shape else 1
    if batch == 1:
        return samples
    return [[torch.cat([s[i] for s in samples[j:j + batch]]) for i in range(len(specs))]
            for j in range(0, len(samples) - batch + 1, batch)]


def _target_findings(result: TargetSupport) -> list[Finding]:
    plugin = probe_module(result.target)
    label = plugin.LABEL
    if result.status == "unavailable":
        return []
    pieces = ("" if result.partitions is None else
              f"; {plugin.LABEL} then runs none of the model" if result.partitions == 0 else
              f"; the graph splits into {result.partitions} partition(s)")
    if result.status == "failed" and not result.unsupported:
        import re

        # say that the message names a line only when it does (a file:line in it)
        fix = ("make the model convert for this target first (the message names the line and the way out)"
               if re.search(r"\.py:\d+|line \d+", result.summary) else
               "make the model convert for this target first; the message names no source line: the export's "
               "traceback (--debug) shows where it stopped")
        return [Finding(Rule.TARGET_SUPPORT, Severity.WARN, "", f"{label}: {result.summary}", fix,
                        {"target": result.target, "partitions": result.partitions}, target=result.target)]
    findings = []
    for op in result.unsupported:
        where = ", ".join(m or "(model)" for m in op.modules[:4]) + (" ..." if len(op.modules) > 4 else "")
        findings.append(Finding(
            Rule.TARGET_SUPPORT, Severity.WARN, op.modules[0] if op.modules else "",
            f"{label} does not take {op.op} ({op.count} node(s) in {where or '(model)'}): {op.reason}{pieces}",
            op.fix or plugin.FIX,
            {"target": result.target, "op": op.op, "nodes": op.count, "modules": op.modules,
             "partitions": result.partitions, "ops_total": result.ops_total, "ops_supported": result.ops_supported},
            target=result.target, location=op.location))
    return findings
