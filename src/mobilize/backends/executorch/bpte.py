"""Bundled programs (``.bpte``): read the program's sample inputs, expected outputs and tolerances.

A ``.bpte`` lets a device check itself: the runtime loads a bundled input, runs the method and
compares with the bundled expected output.  The tolerances travel in the ``.bpte``'s manifest
(``model.bpte.manifest.json``, key ``bundle``) because the bundle schema has no field for them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from mobilize.core.errors import UnsupportedModelError
from mobilize.backends.executorch.pte import SCALAR_TYPES, tables, union

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-4
METHOD = "forward"


@dataclasses.dataclass
class BundledCase:
    inputs: list
    expected_outputs: list


def bundle_tolerances(path: str | Path) -> tuple[float, float]:
    """(atol, rtol) from the ``.bpte``'s manifest when it matches the file, else the float defaults."""
    from mobilize.core.artifact import sha256_of

    manifest = Path(str(path) + ".manifest.json")
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        if "bundle" in data and data.get("sha256") == sha256_of(path):
            return float(data["bundle"]["atol"]), float(data["bundle"]["rtol"])
    return DEFAULT_ATOL, DEFAULT_RTOL


def check_bundle(data: bytes, what: str) -> None:
    """Refuse a bundled program cut short: the embedded program (sizes, segments, offsets) and every
    bundled test case (inputs, expected outputs, their tensor data) must lie inside the file."""
    from mobilize.backends.executorch.pte import CheckedReader, Incomplete, check_program

    try:
        if len(data) < 8 or data[4:6] != b"BP":
            raise Incomplete("no 'BP' file identifier")
        reader = CheckedReader(data)
        root = reader.root()
        start, count = reader.vector(root, 8, 1)  # BundledProgram.program: [ubyte]
        if count == 0:
            raise Incomplete("it holds no program")
        for suite in reader.tables(root, 6):  # method_test_suites
            reader.string(suite, 4)  # method_name
            for case in reader.tables(suite, 6):  # test_cases
                for field in (4, 6):  # inputs, expected_outputs: [Value {val_type, val}]
                    for value in reader.tables(case, field):
                        kind = reader.field(value, 4)
                        tensor = reader.table(value, 6)
                        if kind is not None and reader.u8(kind) == 1 and tensor is not None:  # ValueUnion.Tensor
                            reader.vector(tensor, 6, 4)  # sizes
                            reader.vector(tensor, 8, 1)  # data
                            reader.vector(tensor, 10, 1)  # dim_order
    except Incomplete as exc:
        raise UnsupportedModelError(f"{what} is truncated or corrupt ({len(data)} bytes): {exc}",
                                    hint="export it again, or copy the whole file") from None
    check_program(bytes(data[start:start + count]), f"the program inside {what}")


def read_test_cases(path: str | Path, method: str = METHOD) -> list[BundledCase]:
    """Deserialize the bundled test cases (inputs and expected outputs as torch tensors)."""
    import importlib

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


def _value(value: Any) -> Any:
    from executorch.devtools.bundled_program.serialize.generated.bundled_program_flatbuffer import (
        Bool, Double, Int, Tensor, ValueUnion,
    )

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

    dtype = getattr(torch, SCALAR_TYPES.get(t.ScalarType(), "float32"))
    sizes = [int(t.Sizes(i)) for i in range(t.SizesLength())]
    order = [int(t.DimOrder(i)) for i in range(t.DimOrderLength())] or list(range(len(sizes)))
    raw = t.DataAsNumpy()
    raw = raw.tobytes() if isinstance(raw, np.ndarray) else b""
    flat = torch.frombuffer(bytearray(raw), dtype=dtype) if raw else torch.empty(0, dtype=dtype)
    physical = flat.reshape([sizes[d] for d in order])
    return physical.permute([order.index(d) for d in range(len(order))])
