"""Read what an ExecuTorch ``.pte`` (or the program inside a ``.bpte``) will execute, without running it.

The flatbuffer is read lazily with ExecuTorch's generated readers: the input dim orders the
program expects (the pybindings runtime does not check them: a channels-last program fed an
NCHW tensor returns wrong numbers silently), and every instruction of the forward plan —
portable kernel calls by operator, delegate calls by backend.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import struct
from pathlib import Path
from typing import Iterator

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
    from mobilize.core.errors import UnsupportedModelError

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


class Incomplete(Exception):
    """A flatbuffer offset or a declared size points past the end of the data."""


class CheckedReader:
    """Bounds-checked reads of a flatbuffer: the generated readers (and the runtime) trust every offset,
    so a file cut short reads past its end, returns garbage or aborts the process."""

    def __init__(self, data: bytes, limit: int | None = None):
        self.data = data
        self.limit = len(data) if limit is None else min(limit, len(data))

    def _get(self, fmt: str, pos: int) -> int:
        if pos < 0 or pos + struct.calcsize(fmt) > self.limit:
            raise Incomplete(f"an offset points at byte {pos}, past the end ({self.limit} bytes)")
        return struct.unpack_from(fmt, self.data, pos)[0]

    def u8(self, pos: int) -> int:
        return self._get("<B", pos)

    def u32(self, pos: int) -> int:
        return self._get("<I", pos)

    def u64(self, pos: int) -> int:
        return self._get("<Q", pos)

    def root(self) -> int:
        return self.u32(0)

    def field(self, table: int, offset: int) -> int | None:
        """The position of a table's field (``offset`` is its vtable slot: 4, 6, 8, ...), None if absent."""
        vtable = table - self._get("<i", table)
        if offset >= self._get("<H", vtable):
            return None
        slot = self._get("<H", vtable + offset)
        return table + slot if slot else None

    def table(self, table: int, offset: int) -> int | None:
        pos = self.field(table, offset)
        return None if pos is None else pos + self.u32(pos)

    def vector(self, table: int, offset: int, element_bytes: int) -> tuple[int, int]:
        """(start of the elements, count) of a vector field, its whole extent checked; (0, 0) if absent."""
        pos = self.field(table, offset)
        if pos is None:
            return 0, 0
        start = pos + self.u32(pos)
        count = self.u32(start)
        end = start + 4 + count * element_bytes
        if end > self.limit:
            raise Incomplete(f"a {count * element_bytes}-byte block ends at byte {end}, past the end "
                             f"({self.limit} bytes)")
        return start + 4, count

    def string(self, table: int, offset: int) -> bytes:
        start, count = self.vector(table, offset, 1)
        self.u8(start + count)  # the terminating zero byte
        return self.data[start:start + count]

    def tables(self, table: int, offset: int) -> list[int]:
        start, count = self.vector(table, offset, 4)
        return [start + 4 * i + self.u32(start + 4 * i) for i in range(count)]


EXTENDED_HEADER_MAGIC = b"eh00"
"""ExecuTorch's extended header, at bytes 8.. of a .pte: program size, segment base offset, segment data size."""


def check_program(data: bytes, what: str) -> None:
    """Refuse a program whose declared sizes, segment table or flatbuffer offsets reach past the end of
    ``data`` (a .pte cut short, or the program inside a .bpte): UnsupportedModelError, before any runtime
    sees it."""
    from mobilize.core.errors import UnsupportedModelError

    size = len(data)
    try:
        if size < 8 or data[4:6] != PROGRAM_ID:
            raise Incomplete("no ExecuTorch flatbuffer header")
        reader = CheckedReader(data)
        program_size, base, segment_bytes = size, 0, 0
        if data[8:12] == EXTENDED_HEADER_MAGIC:
            length = reader.u32(12)
            program_size, base = reader.u64(16), reader.u64(24)
            segment_bytes = reader.u64(32) if length > 24 else 0
            declared = max(program_size, base + segment_bytes if base else 0)
            if declared > size:
                raise Incomplete(f"its header declares {declared} bytes")
        reader.limit = program_size
        root = reader.root()
        for segment in reader.tables(root, 12):  # Program.segments: [DataSegment {offset, size}]
            offset = reader.u64(reader.field(segment, 4)) if reader.field(segment, 4) is not None else 0
            length = reader.u64(reader.field(segment, 6)) if reader.field(segment, 6) is not None else 0
            if not base:
                raise Incomplete("it lists data segments but has no extended header to place them")
            if base + offset + length > size:
                raise Incomplete(f"a data segment ends at byte {base + offset + length}")
        for buffer in reader.tables(root, 8):  # constant_buffer: [Buffer {storage: [ubyte]}]
            reader.vector(buffer, 4, 1)
        for inline in reader.tables(root, 10):  # backend_delegate_data: [BackendDelegateInlineData {data}]
            reader.vector(inline, 4, 1)
        for plan in reader.tables(root, 6):  # execution_plan: the tables read_program walks
            for field in (8, 14, 16, 18):  # values, chains, operators, delegates
                reader.tables(plan, field)
            reader.vector(plan, 10, 4)  # inputs
    except Incomplete as exc:
        raise UnsupportedModelError(f"{what} is truncated or corrupt ({size} bytes): {exc}",
                                    hint="export it again, or copy the whole file") from None


def check_complete(path: str | Path) -> None:
    """A ``.pte`` (or ``.bpte``, told apart by its file identifier) whose every declared byte is in the file."""
    from mobilize.backends.executorch import bpte

    check_header(path)
    data = Path(path).read_bytes()
    if data[4:6] == BUNDLE_ID:
        bpte.check_bundle(data, str(path))
    else:
        check_program(data, str(path))


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


READERS = ("Program", "ExecutionPlan", "Chain", "Instruction", "Operator", "BackendDelegate", "EValue", "Tensor",
           "KernelCall", "DelegateCall", "InstructionArguments", "KernelTypes")


HEAVY_INITS = ("executorch.exir", "executorch.exir._serialize", "executorch.devtools")
"""ExecuTorch packages whose ``__init__`` imports the exporter's whole stack (torch.export, the passes, torchao;
devtools' its Inspector too): 2.9 s (exir) and 5.6 s (devtools) on 2-core Zen 4, in processes that only run,
read or profile a ``.pte`` - bench, each timing and checking worker - and need none of it."""


@contextlib.contextmanager
def past_heavy_inits() -> Iterator[None]:
    """While inside, an import from ExecuTorch runs the ``__init__`` of none of the HEAVY_INITS not loaded yet: the
    program's generated flatbuffer readers and ETDump's reader import nothing heavy themselves.

    Each such package is stood in for by a module made from its own spec but never run; on the way out every
    ``sys.modules`` entry under a stood-in package is taken out again (callers keep the modules they got), so a
    later real import (an export in the same process) runs those packages' ``__init__`` as if this had never
    happened. A namespace package under a stand-in finds its folders through it, so code that reads such a
    package's files (ETDump's schema) runs inside too."""
    import importlib.util
    import sys

    from mobilize.core.packages import location

    base = location("executorch")
    stood: list[str] = []
    try:
        for package in HEAVY_INITS:
            folder = base.joinpath(*package.split(".")[1:]) if base is not None else None
            if folder is not None and (folder / "__init__.py").is_file() and package not in sys.modules:
                # the package's own spec and loader (its files are read through them: flatc, schemas), not run
                spec = importlib.util.spec_from_file_location(package, folder / "__init__.py",
                                                              submodule_search_locations=[str(folder)])
                sys.modules[package] = importlib.util.module_from_spec(spec)
                stood.append(package)
        yield
    finally:
        for name in [m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in stood)]:
            del sys.modules[name]


@functools.cache
def generated_readers() -> dict[str, type]:
    """ExecuTorch's generated flatbuffer reader classes by name (they sit inside
    ``executorch.exir``: :func:`past_heavy_inits`, which takes them out of
    ``sys.modules`` again, hence the cache: one import a process)."""
    import importlib

    with past_heavy_inits():
        package = importlib.import_module("executorch.exir._serialize.generated.executorch_flatbuffer")
    return {name: getattr(getattr(package, name), name) for name in READERS}


def read_program(data: bytes, method: str = "forward") -> ProgramSummary:
    fb = generated_readers()
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
