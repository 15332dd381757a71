"""``compare --verify-on arm64``: after the host's checks and timed rounds, each variant's file runs again on
the same samples, once on the host and once inside the arm64 root under QEMU (each in its own process,
with the stage timeout), and both outputs are judged against the float reference with the run's Policy.
The result goes into the variant's ``arm64`` field of report.json; a variant whose arm64 verdict differs
from its host verdict gets a note (and a flag in the table and report.html).  Emulated wall times are
recorded as ``wall_s_not_latency`` and never shown as latency.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from mobilize.arm64.run import check_cpu, missing, run_children
from mobilize.arm64.verdict import check_outputs, failed_check, flag
from mobilize.core.backend import host_only as host_only_reason
from mobilize.core.errors import UserError

DEFAULT_SAMPLES = 64
"""Samples per variant under emulation (the first of compare's accuracy samples): 0.1-0.5 s each on QEMU."""



def verify_variants(results: dict[str, Any], samples: Sequence[Sequence[Any]], labels: Sequence[int] | None,
                    reference: dict[str, Any], *, policy, cpu: str, timeout_s: float, count: int = DEFAULT_SAMPLES,
                    log_dir=None, status: Callable[[str], None] = lambda text: None,
                    save: Callable[[], None] = lambda: None) -> None:
    """Check every variant that has a file on arm64; ``results`` maps names to VariantResult.  All files run in
    one host child and one arm64 child (under emulation the runtimes take minutes to import)."""
    from mobilize.arm64.verdict import judge_outputs

    check_cpu(cpu)
    why = missing()
    n = min(count, len(samples))
    xs, ys = list(samples[:n]), (list(labels[:n]) if labels is not None else None)
    ref_outs, names = reference["outputs"][:n], reference.get("names")
    todo = []
    for r in results.values():
        skip = why or _skip_reason(r)
        if skip:
            r.note(f"arm64: not checked: {skip}")
        else:
            todo.append(r)
    if not todo:
        return
    files = [(r.artifact, r.runtime) for r in todo]
    log = str(log_dir / "arm64.log") if log_dir else None
    status(f"arm64: the {len(todo)} files on the host's kernels ({n} samples)")
    try:
        hosts = run_children(files, xs, on="host", timeout_s=timeout_s, log_path=log)
    except UserError as exc:
        for r in todo:
            r.note(f"arm64: not checked: the host's run of the files failed: {exc}")
        return
    status(f"arm64: the {len(todo)} files under QEMU ({cpu}, {n} samples; emulation is slow)")
    try:
        arms = run_children(files, xs, on="arm64", cpu=cpu, timeout_s=timeout_s * len(todo), log_path=log)
    except UserError as exc:
        arms = [None] * len(todo)
        failure = str(exc)
    for r, host, arm in zip(todo, hosts, arms):
        if host.error:
            r.note(f"arm64: not checked: the file failed in the host's child: {host.error}")
            continue
        if arm is None or arm.error:
            host_v = judge_outputs(host.outputs, ref_outs, ys, r.kind, policy, names).to_json()
            message = failure if arm is None else arm.error
            r.details["arm64"] = failed_check(message, host_v, arm.machine if arm else {"qemu_cpu": cpu})
            r.note(f"arm64: RUN_FAIL under QEMU ({cpu}): {message}")
            continue
        check = check_outputs(arm.outputs, host.outputs, ref_outs, ys, r.kind, policy, machine=arm.machine,
                              names=names)
        r.details["arm64"] = {**check.to_json(), "samples": n}
        if check.differs:
            r.note(f"WARNING arm64 verdict differs from the host's ({flag(check.to_json())}, QEMU {cpu}): "
                   f"{check.verdict['reason']}")
    save()


def _skip_reason(r) -> str | None:
    if not r.artifact:
        return ("no file: an eager module runs in this process's PyTorch; export it (TorchScript, ExecuTorch, ONNX) "
                "to check it on arm64")
    host_only = host_only_reason(r.format)  # an engine's format that never runs in the arm64 root
    if host_only:
        return host_only
    if r.verdict is None:
        return f"its host check did not finish ({r.outcome})"
    return None
