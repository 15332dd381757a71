"""Bundled programs (``.bpte``): the program plus sample inputs, expected outputs and tolerances.

A ``.bpte`` lets a device check itself: the runtime loads a bundled input, runs the method
and compares with the bundled expected output (ExecuTorch's ``verify_result_with_bundled_expected_output``).
The tolerances travel in the ``.bpte``'s manifest (``model.bpte.manifest.json``, key ``bundle``)
because the bundle schema has no field for them.

    >>> from mobilize.exporters._bundled_program import bundled_inputs, verify_bundled_program
    >>> [tuple(t.shape) for t in bundled_inputs("out/model.bpte")[0]]
    [(1, 3, 224, 224)]
    >>> verify_bundled_program("out/model.bpte").max_abs_error      # raises AccuracyError on a mismatch
    3.1e-06
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

from mobilize.errors import AccuracyError, UnsupportedModelError

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-4
METHOD = "forward"
# ExecuTorch ScalarType codes -> torch dtype names.
_DTYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64",
           11: "bool", 15: "bfloat16"}


@dataclasses.dataclass
class BundledCase:
    inputs: list
    expected_outputs: list


@dataclasses.dataclass
class BundleCheck:
    """The result of verifying every bundled test case on this host."""

    path: Path
    atol: float
    rtol: float
    cases: list[dict[str, Any]]
    """Per test case: ``{"case": i, "ok": bool, "max_abs_error": float}``."""

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
    from mobilize.artifact import atomic_write_text, sha256_of

    data = {**fields, "path": str(path), "size_bytes": path.stat().st_size, "sha256": sha256_of(path),
            "bundle": {"method": METHOD, "test_cases": len(read_test_cases(path)), "atol": atol, "rtol": rtol,
                       "expected_from": expected_from}}
    atomic_write_text(path.with_name(path.name + ".manifest.json"), json.dumps(data, indent=2) + "\n")


def bundle_tolerances(path: str | Path) -> tuple[float, float]:
    """(atol, rtol) from the ``.bpte``'s manifest when it matches the file, else the float defaults."""
    from mobilize.artifact import sha256_of

    manifest = Path(str(path) + ".manifest.json")
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        if "bundle" in data and data.get("sha256") == sha256_of(path):
            return float(data["bundle"]["atol"]), float(data["bundle"]["rtol"])
    return DEFAULT_ATOL, DEFAULT_RTOL


def read_test_cases(path: str | Path, method: str = METHOD) -> list[BundledCase]:
    """Deserialize the bundled test cases (inputs and expected outputs as torch tensors)."""
    import importlib

    from mobilize.exporters._executorch_pte import tables

    gen = "executorch.devtools.bundled_program.serialize.generated.bundled_program_flatbuffer."
    fb = {n: getattr(importlib.import_module(gen + n), n)
          for n in ("BundledProgram", "BundledMethodTestSuite", "BundledMethodTestCase", "Value")}
    data = Path(path).read_bytes()
    if data[4:6] != b"BP":
        raise UnsupportedModelError(f"{path} is not an ExecuTorch bundled program (no 'BP' file identifier)")
    for suite in tables(fb["BundledProgram"].GetRootAs(data, 0), 6, fb["BundledMethodTestSuite"]):
        if suite.MethodName().decode() == method:
            return [BundledCase([_value(v) for v in tables(tc, 4, fb["Value"])],
                                [_value(v) for v in tables(tc, 6, fb["Value"])])
                    for tc in tables(suite, 6, fb["BundledMethodTestCase"])]
    return []


def bundled_inputs(path: str | Path) -> list[list]:
    """Every bundled input list, for ``mobilize bench x.bpte --use_bundled_input N``."""
    return [case.inputs for case in read_test_cases(path)]


def verify_bundled_program(path: str | Path, *, atol: float | None = None, rtol: float | None = None) -> BundleCheck:
    """Run every bundled test case in the ExecuTorch runtime on this host; AccuracyError on any mismatch."""
    from mobilize.artifact import Artifact
    from mobilize.runtimes.base import open_session

    path = Path(path)
    default_atol, default_rtol = bundle_tolerances(path)
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    with open_session(Artifact.from_file(path), "executorch") as session:
        check = BundleCheck(path, atol, rtol, session.verify_bundled(atol=atol, rtol=rtol))
    if not check.cases:
        raise AccuracyError(f"{path.name} bundles no test cases for '{METHOD}'", stage="verify")
    bad = [c for c in check.cases if not c["ok"]]
    if bad:
        detail = "; ".join(f"case {c['case']}: max abs error {c['max_abs_error']:.3g}" for c in bad)
        raise AccuracyError(f"{path.name}: {len(bad)} of {len(check.cases)} bundled test case(s) do not match their "
                            f"expected outputs within atol {atol:.2g} + rtol {rtol:.2g} x |expected| ({detail})",
                            stage="verify", hint="the program and its bundled outputs disagree: re-export, or check "
                                                 "the runtime build on this device")
    return check


def _value(value: Any) -> Any:
    from executorch.devtools.bundled_program.serialize.generated.bundled_program_flatbuffer import (
        Bool, Double, Int, Tensor, ValueUnion,
    )

    from mobilize.exporters._executorch_pte import union

    kinds = ValueUnion.ValueUnion
    readers = {kinds.Tensor: (Tensor.Tensor, _tensor), kinds.Int: (Int.Int, lambda v: v.IntVal()),
               kinds.Bool: (Bool.Bool, lambda v: v.BoolVal()), kinds.Double: (Double.Double, lambda v: v.DoubleVal())}
    if value.ValType() not in readers:
        return None
    cls, read = readers[value.ValType()]
    return read(union(value.Val(), cls))


def _tensor(t: Any):
    import numpy as np
    import torch

    dtype = getattr(torch, _DTYPES.get(t.ScalarType(), "float32"))
    sizes = [int(t.Sizes(i)) for i in range(t.SizesLength())]
    order = [int(t.DimOrder(i)) for i in range(t.DimOrderLength())] or list(range(len(sizes)))
    raw = t.DataAsNumpy()
    raw = raw.tobytes() if isinstance(raw, np.ndarray) else b""
    flat = torch.frombuffer(bytearray(raw), dtype=dtype) if raw else torch.empty(0, dtype=dtype)
    physical = flat.reshape([sizes[d] for d in order])
    return physical.permute([order.index(d) for d in range(len(order))])
