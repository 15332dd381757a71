"""Verify one file on arm64 kernels: refuse up front where no arm64 root is, run it there, and the report's
lines.  (The package docstring tells the whole story.)"""

from __future__ import annotations

import json
from typing import Any, Sequence

from mobilize.core.errors import BackendUnavailableError, ConfigError


def require_arm64(cpu: str) -> None:
    """Before any work: the CPU model is known and the arm64 root can run, else one line (exit 2)."""
    from mobilize.arm64.run import check_cpu, missing

    check_cpu(cpu)
    why = missing()
    if why:
        raise BackendUnavailableError(f"cannot verify on arm64: {why}")


def verify_samples(artifact: Any, path: str, data: str | None, samples: int, input_specs: Sequence[Any]):
    """The samples a verify run feeds the host and the other side: ``data``'s (with labels where it has them),
    else seeded random inputs; (inputs, labels or None)."""
    from mobilize.core.inputs import make_random_inputs
    from mobilize.sources.data import dataclass_replace_batch, open_data

    specs = [dataclass_replace_batch(s, 1) for s in (input_specs or artifact.input_specs)]
    if not specs:
        raise ConfigError(f"the input shape of {path} is unknown (no manifest beside it)",
                          hint='give --input_dims, e.g. "1,1,96,96"')
    if data:
        return open_data(data).labelled_sample_lists(specs, samples)
    return [make_random_inputs(specs, seed) for seed in range(min(samples, 16))], None


def verify_reference(model: str | None, xs: Sequence[Any], host_outputs: Any, versus: str) -> tuple[Any, str]:
    """What a verify run judges against, and how it says so: ``model``'s float outputs on ``xs``, else the same
    file's on the host (``versus`` says what that comparison is)."""
    if not model:
        return host_outputs, f"the same file on the host ({versus})"
    import torch

    from mobilize.runtimes.base import flatten_outputs
    from mobilize.sources.models import resolve_model

    module = resolve_model(model).module
    with torch.inference_mode():
        return [[t.detach().float() for t in flatten_outputs(module(*x))] for x in xs], f"the float model {model}"


def report_lines(report: dict[str, Any]) -> list[str]:
    """compare's arm64 section: one line per variant checked, the reasons for the others."""
    from mobilize.arm64.verdict import summary

    checked = [(v["name"], v["arm64"]) for v in report["variants"] if v.get("arm64")]
    first = checked[0][1] if checked else {}
    versions = ", ".join(f"{k} {v}" for k, v in (first.get("versions") or {}).items())
    lines = ["arm64 under QEMU (emulated: outputs are the target's kernels', times are not latency)"
             + (f"; {versions}" if versions else "")]
    lines += [summary(name, check) for name, check in checked]
    for v in report["variants"]:
        for note in v.get("notes") or []:
            if note.startswith("arm64: not checked"):
                lines.append(f"{v['name']}: {note}")
    return lines


def kind_of(recipe: dict[str, Any] | None) -> str:
    """What a file promises, from the recipe in its manifest: changed (a prune pass), quantized (a quantize pass
    or an int8 exporter option), reduced (fp16/bf16), else float."""
    text = json.dumps(recipe or {}).lower()
    if '"prune"' in text:
        return "changed"
    if "quantiz" in text or "int8" in text:
        return "quantized"
    if "fp16" in text or "bf16" in text or "float16" in text:
        return "reduced"
    return "float"


def verify_file(path: str, *, model: str | None = None, data: str | None = None, samples: int = 64,
                kind: str | None = None, cpu: str = "cortex-a76", timeout_s: float = 900.0, policy=None,
                input_specs: Sequence[Any] = (), runtime: str | None = None) -> dict[str, Any]:
    """``path`` on the host and on arm64, both judged against ``model``'s outputs (or, without a model, against
    the same file on the host)."""

    from mobilize.accuracy.verify import DEFAULT_POLICY
    from mobilize.arm64.run import run_child
    from mobilize.arm64.verdict import check_outputs
    from mobilize.core.artifact import Artifact

    require_arm64(cpu)
    policy = policy or DEFAULT_POLICY
    artifact = Artifact.from_file(path)
    kind = kind or kind_of(artifact.recipe)
    xs, ys = verify_samples(artifact, path, data, samples, input_specs)
    host = run_child(path, xs, on="host", runtime=runtime, timeout_s=timeout_s)
    reference, against = verify_reference(model, xs, host.outputs, f"{kind}: the arm64 kernels vs the host's")
    arm = run_child(path, xs, on="arm64", runtime=runtime, cpu=cpu, timeout_s=timeout_s)
    check = check_outputs(arm.outputs, host.outputs, reference, ys if model else None, kind, policy,
                          machine=arm.machine)
    return {"file": str(path), "format": str(artifact.format), "kind": kind, "against": against, "data": data,
            "samples": len(xs), "host_machine": host.machine, **check.to_json()}
