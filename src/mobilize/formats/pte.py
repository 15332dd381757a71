"""Read what an ExecuTorch ``.pte`` (or the program inside a ``.bpte``) will execute, without running it.

The flatbuffer is read lazily with ExecuTorch's generated readers: the input dim orders the
program expects (the pybindings runtime does not check them: a channels-last program fed an
NCHW tensor returns wrong numbers silently), and every instruction of the forward plan —
portable kernel calls by operator, delegate calls by backend.

    >>> summary = read_program(program_bytes("model.pte"))
    >>> summary.input_dim_orders, dict(summary.delegate_calls), dict(summary.kernel_calls)
    ([(0, 1, 2, 3)], {'XnnpackBackend': 1}, {})
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

PROGRAM_ID = b"ET"
"""File identifier of a program flatbuffer at bytes 4..8 ('ET12' in executorch 1.5)."""
BUNDLE_ID = b"BP"
"""File identifier of a bundled program ('BP08' in executorch 1.5, from bundled_program_schema.fbs)."""

SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64",
                11: "bool", 15: "bfloat16"}
"""ExecuTorch ScalarType codes (c10 numbering) -> torch dtype names."""


def check_header(path, identifiers: tuple[bytes, ...] = (PROGRAM_ID, BUNDLE_ID)) -> bytes:
    """A flatbuffer's file identifier sits at bytes 4..8 ('ET12' for programs, 'BP08' for bundled ones);
    returns it.  The runtime aborts the whole process on a corrupt file, so check before handing it over."""
    from mobilize.errors import UnsupportedModelError

    with open(path, "rb") as fh:
        head = fh.read(8)
    if len(head) < 8 or not any(head[4:8].startswith(i) for i in identifiers):
        raise UnsupportedModelError(f"{path} is not an ExecuTorch program (no ExecuTorch flatbuffer header)")
    return head[4:8]


@dataclasses.dataclass
class ProgramSummary:
    """The forward method of a serialized ExecuTorch program."""

    input_dim_orders: list[tuple[int, ...] | None]
    """Per input: the memory order of its dimensions ((0, 2, 3, 1) is channels-last), None if not a tensor."""
    kernel_calls: collections.Counter
    """Operator name (``aten::convolution.out``) -> instructions that run it on a portable/optimized kernel."""
    delegate_calls: collections.Counter
    """Backend id (``XnnpackBackend``) -> delegate call instructions."""
    operators: list[str]
    """Every operator the program's kernel calls need, ``name.overload``."""


def program_bytes(path: str | Path) -> bytes:
    """The serialized program of a ``.pte``, or the one embedded in a ``.bpte``."""
    data = Path(path).read_bytes()
    if data[4:6] != BUNDLE_ID:
        return data
    # BundledProgram.program is field 2 (vtable offset 8), a [ubyte] vector.  Read it with plain
    # flatbuffers: the generated reader lives in executorch.devtools, whose import costs ~0.5 s.
    import flatbuffers

    root = flatbuffers.table.Table(data, flatbuffers.encode.Get(flatbuffers.packer.uoffset, data, 0))
    field = root.Offset(8)
    if field == 0:
        return b""
    start = root.Vector(field)
    return data[start:start + root.VectorLen(field)]


def read_program(data: bytes, method: str = "forward") -> ProgramSummary:
    import importlib

    gen = "executorch.exir._serialize.generated.executorch_flatbuffer."
    fb = {name: getattr(importlib.import_module(gen + name), name) for name in (
        "Program", "ExecutionPlan", "Chain", "Instruction", "Operator", "BackendDelegate", "EValue", "Tensor",
        "KernelCall", "DelegateCall", "InstructionArguments", "KernelTypes")}
    program = fb["Program"].GetRootAs(data, 0)
    plans = tables(program, 6, fb["ExecutionPlan"])
    plan = next((p for p in plans if (p.Name() or b"").decode() == method), plans[0] if plans else None)
    if plan is None:
        return ProgramSummary([], collections.Counter(), collections.Counter(), [])
    operators = []
    for op in tables(plan, 16, fb["Operator"]):
        overload = (op.Overload() or b"").decode()
        operators.append(op.Name().decode() + (f".{overload}" if overload else ""))
    delegates = [d.Id().decode() for d in tables(plan, 18, fb["BackendDelegate"])]
    kernels, calls = collections.Counter(), collections.Counter()
    for chain in tables(plan, 14, fb["Chain"]):
        for instr in tables(chain, 8, fb["Instruction"]):
            kind = instr.InstrArgsType()
            if kind == fb["InstructionArguments"].KernelCall:
                kernels[operators[union(instr.InstrArgs(), fb["KernelCall"]).OpIndex()]] += 1
            elif kind == fb["InstructionArguments"].DelegateCall:
                calls[delegates[union(instr.InstrArgs(), fb["DelegateCall"]).DelegateIndex()]] += 1
    values = tables(plan, 8, fb["EValue"])
    dim_orders: list[tuple[int, ...] | None] = []
    for i in range(plan.InputsLength()):
        value = values[plan.Inputs(i)]
        if value.ValType() != fb["KernelTypes"].Tensor:
            dim_orders.append(None)
            continue
        tensor = union(value.Val(), fb["Tensor"])
        dim_orders.append(tuple(int(tensor.DimOrder(j)) for j in range(tensor.DimOrderLength())))
    return ProgramSummary(dim_orders, kernels, calls, operators)


def tables(owner, field_offset: int, cls) -> list:
    """A vector-of-tables field, read with vtable offsets (the generated accessors for these fields
    construct their element class from a name that an import cycle leaves bound to the module)."""
    tab = owner._tab
    o = tab.Offset(field_offset)
    if o == 0:
        return []
    start = tab.Vector(o)
    out = []
    for j in range(tab.VectorLen(o)):
        obj = cls()
        obj.Init(tab.Bytes, tab.Indirect(start + 4 * j))
        out.append(obj)
    return out


def union(table, cls):
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    return obj


def is_channels_last(dim_order: tuple[int, ...] | None) -> bool:
    return dim_order == (0, 2, 3, 1)
