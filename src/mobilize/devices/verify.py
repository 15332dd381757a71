"""``mobilize verify FILE --on DEVICE`` for every device kind but the arm64 root (which has its own path in
:mod:`mobilize.arm64.files`, with the emulated CPU's options): the file checked on the same samples on the host and
on the device (one :meth:`~mobilize.devices.base.Device.check` each), both judged by the verify core against the same
reference, and how far the device's outputs are from the host's.  The device's facts (its CPU as it reports itself)
go with the result; a file the device's runtime cannot run is RUN_FAIL there, said why, the host's verdict beside it.
"""

from __future__ import annotations

from typing import Any, Sequence


def verify_on_device(path: str, spec: str, *, model: str | None = None, data: str | None = None, samples: int = 64,
                     kind: str | None = None, timeout_s: float = 900.0, policy: Any = None,
                     input_specs: Sequence[Any] = (), runtime: str | None = None) -> dict[str, Any]:
    """``path`` on the host and on device ``spec`` (``ssh://...``, a devices-file name or ``host``), judged as
    :func:`mobilize.arm64.files.verify_file` judges the arm64 run."""
    from mobilize.accuracy.metrics import compare_outputs
    from mobilize.accuracy.verify import DEFAULT_POLICY, Verdict
    from mobilize.arm64.files import kind_of, verify_reference, verify_samples
    from mobilize.arm64.verdict import judge_outputs
    from mobilize.core.artifact import Artifact
    from mobilize.core.errors import ConfigError
    from mobilize.core.outcome import Outcome
    from mobilize.devices.registry import resolve

    device = resolve(spec)  # an unknown name or a bad address: one line before any work
    policy = policy or DEFAULT_POLICY
    artifact = Artifact.from_file(path)
    kind = kind or kind_of(artifact.recipe)
    xs, ys = verify_samples(artifact, path, data, samples, input_specs)
    files = [(path, runtime)]
    host_machine, [host] = resolve("host").check(files, xs, timeout_s=timeout_s)
    if host.outputs is None:
        raise ConfigError(f"{path} does not run on this host either: {host.error}")
    reference, against = verify_reference(model, xs, host.outputs, f"{kind}: the device's kernels vs the host's")
    try:
        machine, [run] = device.check(files, xs, timeout_s=timeout_s)
    finally:
        device.close()
    host_verdict = judge_outputs(host.outputs, reference, ys if model else None, kind, policy).to_json()
    if run.outputs is None:
        verdict = Verdict(Outcome.RUN_FAIL, "device-run", f"on {device.name}: {run.error}").to_json()
        agreement = None
    else:
        verdict = judge_outputs(run.outputs, reference, ys if model else None, kind, policy).to_json()
        c = compare_outputs(run.outputs, host.outputs, None)
        agreement = {"sqnr_db": None if c.shape_error or not c.finite else c.sqnr_db,
                     "top1_agreement": c.top1_agreement, "max_abs": c.max_abs if c.finite else None,
                     "exact": bool(not c.shape_error and c.finite and c.max_abs == 0)}
    return {"file": str(path), "format": str(artifact.format), "kind": kind, "against": against, "data": data,
            "samples": len(xs), "device": device.describe(), "facts": machine.get("facts") or machine,
            "host_machine": host_machine, "outcome": verdict["outcome"], "host_outcome": host_verdict["outcome"],
            "differs_from_host": verdict["outcome"] != host_verdict["outcome"], "verdict": verdict,
            "host_verdict": host_verdict, "agreement_with_host": agreement,
            "emulated": device.emulated or (machine.get("facts") or {}).get("emulated")}


def result_lines(result: dict[str, Any]) -> list[str]:
    """What the terminal shows of :func:`verify_on_device`'s result."""
    name = result["device"]["name"]
    facts = result.get("facts") or {}
    agree = result.get("agreement_with_host") or {}
    db = agree.get("sqnr_db")
    versus = ("exact" if agree.get("exact") else f"SQNR {db:.1f} dB" if db is not None else "-")
    lines = [f"{result['file']} ({result['format']}, {result['kind']}) on {result['samples']} samples, against "
             f"{result['against']}",
             f"verdict: {name} {result['outcome']} | host {result['host_outcome']} | {name} vs host: {versus}"
             + (f"  <-- DIFFERS: {result['verdict']['reason']}" if result["differs_from_host"] else ""),
             f"  host: {result['host_verdict']['reason']}",
             f"  {name}: {result['verdict']['reason']}",
             f"  {name} ran on {(facts.get('cpu') or {}).get('model') or '?'} ({facts.get('machine', '?')}, "
             f"{facts.get('cores', '?')} cores, {facts.get('os') or '?'}, Python {facts.get('python') or '?'})"
             + (f"; emulated: {result['emulated']}" if result.get("emulated") else "")]
    return lines
