"""``compare --verify-on arm64``: after the host's checks and timed rounds, each variant's file runs again on
the same samples, once on the host and once inside the arm64 root under QEMU (each in its own process,
with the stage timeout), and both outputs are judged against the float reference with the run's Policy.
The result goes into the variant's ``arm64`` field of report.json; a variant whose arm64 verdict differs
from its host verdict gets a note (and a flag in the table and report.html).  Emulated wall times are
recorded as ``wall_s_not_latency`` and never shown as latency.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from mobilize.arm64.run import check_cpu, missing, run_child
from mobilize.arm64.verdict import check_outputs, failed_check, flag
from mobilize.errors import UserError

DEFAULT_SAMPLES = 64
"""Samples per variant under emulation (the first of compare's accuracy samples): 0.1-0.5 s each on QEMU."""

NO_ARM64 = {
    "nnapi": "NNAPI runs on Android only: its numbers are checked on the host interpreter, not on arm64",
}
"""Formats that are never run in the arm64 root, and why."""


def verify_variants(results: dict[str, Any], samples: Sequence[Sequence[Any]], labels: Sequence[int] | None,
                    reference: dict[str, Any], *, policy, cpu: str, timeout_s: float, count: int = DEFAULT_SAMPLES,
                    log_dir=None, status: Callable[[str], None] = lambda text: None,
                    save: Callable[[], None] = lambda: None) -> None:
    """Check every variant that has a file on arm64; ``results`` maps names to VariantResult."""
    check_cpu(cpu)
    why = missing()
    n = min(count, len(samples))
    xs, ys = list(samples[:n]), (list(labels[:n]) if labels is not None else None)
    ref_outs = reference["outputs"][:n]
    for r in results.values():
        if why:
            r.note(f"arm64: not checked: {why}")
            continue
        skip = _skip_reason(r)
        if skip:
            r.note(f"arm64: not checked: {skip}")
            continue
        status(f"{r.name}: arm64 check under QEMU ({cpu}, {n} samples)")
        log = str(log_dir / f"{r.name}-arm64.log") if log_dir else None
        try:
            host = run_child(r.artifact, xs, on="host", runtime=r.runtime, timeout_s=timeout_s, log_path=log)
        except UserError as exc:
            r.note(f"arm64: not checked: the same file failed on the host's child: {exc}")
            continue
        try:
            arm = run_child(r.artifact, xs, on="arm64", runtime=r.runtime, cpu=cpu, timeout_s=timeout_s, log_path=log)
        except UserError as exc:
            from mobilize.arm64.verdict import judge_outputs

            host_v = judge_outputs(host.outputs, ref_outs, ys, r.kind, policy, reference.get("names")).to_json()
            r.details["arm64"] = failed_check(str(exc), host_v, {"machine": "aarch64", "qemu_cpu": cpu})
            r.note(f"arm64: RUN_FAIL under QEMU ({cpu}): {exc}")
        else:
            check = check_outputs(arm.outputs, host.outputs, ref_outs, ys, r.kind, policy, machine=arm.machine,
                                  names=reference.get("names"))
            r.details["arm64"] = check.to_json()
            r.details["arm64"]["samples"] = n
            if check.differs:
                r.note(f"WARNING arm64 verdict differs from the host's ({flag(check.to_json())}, QEMU {cpu}): "
                       f"{check.verdict['reason']}")
        save()


def _skip_reason(r) -> str | None:
    if not r.artifact:
        return ("no file: an eager module runs in this process's PyTorch; export it (TorchScript, ExecuTorch, ONNX) "
                "to check it on arm64")
    if r.format in NO_ARM64:
        return NO_ARM64[r.format]
    if r.verdict is None:
        return f"its host check did not finish ({r.outcome})"
    return None
