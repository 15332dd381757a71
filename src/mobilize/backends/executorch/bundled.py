"""Writing and verifying bundled programs (``.bpte``): the program plus sample inputs, expected
outputs and tolerances (reading them is :mod:`mobilize.backends.executorch.bpte`).

Verification runs every bundled case in the ExecuTorch runtime on this host and judges it with
the verify core's ``allclose`` rule; ExecuTorch's own ``verify_result_with_bundled_expected_output``
is run beside it as a cross-check.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from mobilize.core.jsonfile import dumps
from mobilize.accuracy.verify import verify_close
from mobilize.core.errors import AccuracyError
from mobilize.backends.executorch.bpte import METHOD, BundledCase, bundle_tolerances, read_test_cases


@dataclasses.dataclass
class BundleCheck:
    """The result of verifying every bundled test case on this host."""

    path: Path
    atol: float
    rtol: float
    cases: list[dict[str, Any]]
    """Per test case: ``{"case": i, "ok": bool, "max_abs_error": float, "rule", "reason", "executorch_check_ok"}``."""

    @property
    def ok(self) -> bool:
        return all(c["ok"] for c in self.cases)

    @property
    def max_abs_error(self) -> float:
        return max((c["max_abs_error"] for c in self.cases), default=0.0)

    def describe(self) -> str:
        verdict = "verified" if self.ok else "FAILED"
        return (f"{self.path.name}: {len(self.cases)} bundled case(s) {verdict} on the host "
                f"(max abs error {self.max_abs_error:.2g}; atol {self.atol:.2g}, rtol {self.rtol:.2g})")


def build_bundled_program(manager: Any, cases: Sequence[BundledCase]) -> bytes:
    """Serialize an ExecutorchProgramManager with its test cases to ``.bpte`` bytes."""
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.core import BundledProgram
    from executorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer

    suite = MethodTestSuite(METHOD, [MethodTestCase(inputs=list(c.inputs), expected_outputs=list(c.expected_outputs))
                                     for c in cases])
    return serialize_from_bundled_program_to_flatbuffer(BundledProgram(manager, [suite]))


def write_bundle_manifest(path: Path, fields: dict[str, Any], atol: float, rtol: float, expected_from: str) -> None:
    """An artifact manifest for the ``.bpte``, plus its tolerances under ``bundle``."""
    from mobilize.core.artifact import atomic_write_text, sha256_of

    data = {**fields, "path": str(path), "size_bytes": path.stat().st_size, "sha256": sha256_of(path),
            "bundle": {"method": METHOD, "test_cases": len(read_test_cases(path)), "atol": atol, "rtol": rtol,
                       "expected_from": expected_from}}
    atomic_write_text(path.with_name(path.name + ".manifest.json"), dumps(data, indent=2, what=f"{path.name}.manifest.json") + "\n")


def verify_bundled_program(path: str | Path, *, atol: float | None = None, rtol: float | None = None) -> BundleCheck:
    """Run every bundled test case in the ExecuTorch runtime on this host; AccuracyError on any mismatch."""
    from mobilize.core.artifact import Artifact
    from mobilize.runtimes.base import open_session

    path = Path(path)
    default_atol, default_rtol = bundle_tolerances(path)
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    with open_session(Artifact.from_file(path), "executorch") as session:
        runs = session.run_bundled_cases(atol=atol, rtol=rtol)
    cases = []
    for i, (got, expected, executorch_ok) in enumerate(runs):
        verdict = verify_close(got, expected, atol, rtol)
        cases.append({"case": i, "ok": verdict.ok, "max_abs_error": verdict.numbers.get("max_abs_error", float("nan")),
                      "rule": verdict.rule, "reason": verdict.reason, "executorch_check_ok": executorch_ok})
    check = BundleCheck(path, atol, rtol, cases)
    if not check.cases:
        raise AccuracyError(f"{path.name} bundles no test cases for '{METHOD}'", stage="verify")
    bad = [c for c in check.cases if not c["ok"]]
    if bad:
        detail = "; ".join(f"case {c['case']}: max abs error {c['max_abs_error']:.3g}" for c in bad)
        raise AccuracyError(f"{path.name}: {len(bad)} of {len(check.cases)} bundled test case(s) do not match their "
                            f"expected outputs within atol {atol:.2g} + rtol {rtol:.2g} x |expected| ({detail}; "
                            f"rule allclose)",
                            stage="verify", hint="the program and its bundled outputs disagree: re-export, or check "
                                                 "the runtime build on this device")
    return check
