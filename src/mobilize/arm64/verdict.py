"""The arm64 check of one artifact, beside its host check: both judged by the verify core with one Policy
on the same samples against the same reference, plus how far the arm64 outputs are from the host's
(SQNR, top-1 agreement).  Engine-free: outputs in, verdicts out.

    >>> import torch
    >>> ref = [[torch.tensor([[float(i), 0.0, 1.0]])] for i in range(12)]
    >>> host = [[t + 1e-6 for t in s] for s in ref]
    >>> arm = [[-t for t in s] for s in ref]
    >>> check = check_outputs(arm, host, ref, None, "float", machine={"machine": "aarch64"})
    >>> check.host_verdict["outcome"], check.verdict["outcome"], check.differs
    ('OK', 'MISMATCH', True)
    >>> flag(check.to_json())
    'arm64 MISMATCH, host OK'
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from mobilize.accuracy.metrics import compare_outputs
from mobilize.accuracy.verify import DEFAULT_POLICY, Policy, Verdict, assess
from mobilize.core.errors import InternalError
from mobilize.core.outcome import Outcome

__all__ = ["Arm64Check", "check_outputs", "failed_check", "flag", "judge_outputs", "summary"]


def judge_outputs(outs: Sequence[Sequence[Any]], reference: Sequence[Sequence[Any]], labels: Sequence[int] | None,
                  kind: str, policy: Policy = DEFAULT_POLICY, names: Sequence[str] | None = None,
                  task: str | None = None) -> Verdict:
    """A file's outputs vs the reference, judged as compare judges a variant's quality (:func:`assess`): in the
    model's task (``task``; None: guessed from the reference as compare guesses it)."""
    from mobilize.accuracy.tasks import apply_task

    c = compare_outputs(outs, reference, labels, names=names)
    apply_task(c, task, outs, reference, labels)
    ref_correct = compare_outputs(reference, reference, labels, names=names).correct if labels is not None else None
    return assess(c, kind, policy, reference_correct=ref_correct).verdict


@dataclasses.dataclass
class Arm64Check:
    """One artifact on arm64 kernels beside the host's."""

    verdict: dict[str, Any]
    """The arm64 outputs vs the reference (the verify core's verdict, JSON)."""
    host_verdict: dict[str, Any]
    """The host outputs of the same file vs the same reference, judged the same way."""
    agreement: dict[str, Any]
    """arm64 vs host outputs: ``sqnr_db``, ``top1_agreement``, ``max_abs``, ``flips``."""
    machine: dict[str, Any]
    """What the arm64 child ran on: ``machine`` (aarch64), ``qemu_cpu``, ``cpu_features``, ``versions``."""

    @property
    def differs(self) -> bool:
        return self.verdict["outcome"] != self.host_verdict["outcome"]

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.verdict["outcome"], "host_outcome": self.host_verdict["outcome"],
                "differs_from_host": self.differs, "verdict": self.verdict, "host_verdict": self.host_verdict,
                "agreement_with_host": self.agreement, "emulated": True, **self.machine}


def check_outputs(arm64: Sequence[Sequence[Any]], host: Sequence[Sequence[Any]], reference: Sequence[Sequence[Any]],
                  labels: Sequence[int] | None, kind: str, policy: Policy = DEFAULT_POLICY, *,
                  machine: dict[str, Any], names: Sequence[str] | None = None) -> Arm64Check:
    if machine.get("machine") != "aarch64":  # a result that did not come from arm64 kernels is never one
        raise InternalError(f"the arm64 child reports machine {machine.get('machine')!r}, not aarch64")
    c = compare_outputs(arm64, host, None, names=names)
    agreement = {"sqnr_db": None if c.shape_error or not c.finite else _finite(c.sqnr_db),
                 "top1_agreement": c.top1_agreement, "max_abs": _finite(c.max_abs) if c.finite else None,
                 "flips": c.flips, "samples": c.samples, "shape_error": c.shape_error,
                 "exact": bool(not c.shape_error and c.finite and c.max_abs == 0)}
    return Arm64Check(judge_outputs(arm64, reference, labels, kind, policy, names).to_json(),
                      judge_outputs(host, reference, labels, kind, policy, names).to_json(), agreement, machine)


def failed_check(stage_message: str, host_verdict: dict[str, Any] | None, machine: dict[str, Any]) -> dict[str, Any]:
    """An arm64 run that did not finish (the runtime crashed or timed out under emulation): RUN_FAIL, said why."""
    verdict = Verdict(Outcome.RUN_FAIL, "arm64-run", stage_message).to_json()
    host = host_verdict or {}
    return {"outcome": verdict["outcome"], "host_outcome": host.get("outcome"),
            "differs_from_host": host.get("outcome") != verdict["outcome"], "verdict": verdict,
            "host_verdict": host_verdict, "agreement_with_host": None, "emulated": True, **machine}


def flag(check: dict[str, Any] | None) -> str:
    """The table's and report's flag for a variant whose arm64 verdict differs from its host verdict ('' if not)."""
    if not check or not check.get("differs_from_host"):
        return ""
    return f"arm64 {check['outcome']}, host {check['host_outcome']}"


def summary(name: str, check: dict[str, Any]) -> str:
    """One line: the arm64 verdict, the host's, SQNR of each against the reference and against each other."""
    def sqnr(v: dict[str, Any] | None) -> str:
        x = ((v or {}).get("numbers") or {}).get("sqnr_db")
        return "exact" if x is None and v and v.get("outcome") == "OK" else ("-" if x is None else f"{x:.1f} dB")

    agree = check.get("agreement_with_host") or {}
    top1 = agree.get("top1_agreement")
    features = ",".join(k for k, on in (check.get("cpu_features") or {}).items() if on) or "-"
    text = (f"{name}: arm64 {check['outcome']} (SQNR {sqnr(check.get('verdict'))}) | host "
            f"{check.get('host_outcome')} (SQNR {sqnr(check.get('host_verdict'))}) | arm64 vs host: "
            f"SQNR {_agreement_db(agree)}, top-1 agreement "
            f"{'-' if top1 is None else format(top1, '.1%')} | {check.get('qemu_cpu')} [{features}]")
    if check.get("differs_from_host"):
        text += f"  <-- DIFFERS ({flag(check)}): {check['verdict']['reason']}"
    return text


def _agreement_db(agree: dict[str, Any]) -> str:
    if agree.get("exact"):
        return "exact (bit for bit)"
    return "-" if agree.get("sqnr_db") is None else f"{agree['sqnr_db']:.1f} dB"


def _finite(x: float) -> float | None:
    import math

    return x if math.isfinite(x) else None
