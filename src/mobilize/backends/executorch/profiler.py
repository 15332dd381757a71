"""Per-op times of a ``.pte`` (or ``.bpte``) from ExecuTorch's ETDump, through the pybindings runtime.

The program is loaded with ``enable_etdump=True`` (the pybindings' ETDumpGen event tracer), run
``warmup + runs`` times, and the ETDump is written (``write_etdump_result_to_file``) and read back
with ``executorch.devtools.etdump.serialize`` (the flatc shipped in the wheel).  Each run is one
``Method::execute`` event; inside it, one ``OPERATOR_CALL`` event per kernel instruction and one
``DELEGATE_CALL`` event per delegate call, each tagged with its instruction id, which the program's
own instruction list (read from the file) turns into an op name.  Events a delegate logs itself
(XNNPACK's profiler, when built in) are kept as ``delegate_ops``.  No ETRecord is needed.

When the runtime records nothing (a wheel built without ``EXECUTORCH_ENABLE_EVENT_TRACER``, or an
older pybindings without ``enable_etdump``), the profile says so in ``reason`` and holds no numbers.
"""

from __future__ import annotations

import collections
import statistics
import tempfile
from pathlib import Path
from typing import Any, Sequence

from mobilize.profile.core import OpTime, TimeProfile, unavailable

SOURCE = "ETDump"
RUNS = 20
WARMUP = 3
NO_EVENTS = ("ETDump recorded no events: this executorch wheel's runtime was built without the event tracer "
             "(CMake option EXECUTORCH_ENABLE_EVENT_TRACER)")
NO_EXECUTE = ("ETDump holds op events but no Method::execute event to tell one run from the next (another executorch "
              "version?): per-run times cannot be read from it")


def instruction_labels(data: bytes, method: str = "forward") -> dict[tuple[int, int], tuple[str, int | None]]:
    """(chain, instruction) -> (operator ``aten::avg_pool2d.out`` or backend id ``XnnpackBackend``, delegate index
    or None) for the kernel and delegate calls of ``method``."""
    from mobilize.backends.executorch.pte import generated_readers, tables, union

    fb = generated_readers()
    program = fb["Program"].GetRootAs(data, 0)
    plans = tables(program, 6, fb["ExecutionPlan"])
    plan = next((p for p in plans if (p.Name() or b"").decode() == method), plans[0] if plans else None)
    if plan is None:
        return {}
    operators = []
    for op in tables(plan, 16, fb["Operator"]):
        overload = (op.Overload() or b"").decode()
        operators.append(op.Name().decode() + (f".{overload}" if overload else ""))
    delegates = [d.Id().decode() for d in tables(plan, 18, fb["BackendDelegate"])]
    labels: dict[tuple[int, int], tuple[str, int | None]] = {}
    for c, chain in enumerate(tables(plan, 14, fb["Chain"])):
        for i, instr in enumerate(tables(chain, 8, fb["Instruction"])):
            kind = instr.InstrArgsType()
            if kind == fb["InstructionArguments"].KernelCall:
                labels[(c, i)] = (operators[union(instr.InstrArgs(), fb["KernelCall"]).OpIndex()], None)
            elif kind == fb["InstructionArguments"].DelegateCall:
                index = union(instr.InstrArgs(), fb["DelegateCall"]).DelegateIndex()
                labels[(c, i)] = (delegates[index], index)
    return labels


def record_etdump(path: Path, inputs: Sequence[Any], threads: int, runs: int, warmup: int,
                  out: Path) -> str | None:
    """Run the program with ETDump on and write the dump to ``out``; returns why not, or None."""
    from mobilize.backends.executorch.pte import BUNDLE_ID, check_header, is_channels_last, program_bytes, read_program
    from mobilize.backends.executorch.runtime import _size_pool, portable_lib, quiet_native_stderr

    import torch

    lib = portable_lib()
    _size_pool(threads)  # before loading: XNNPACK binds a program to the pool it finds
    bundled = check_header(str(path)).startswith(BUNDLE_ID)
    try:
        with quiet_native_stderr():
            if bundled:
                bundle = lib._load_bundled_program_from_buffer(Path(path).read_bytes())
                module = lib._load_for_executorch_from_bundled_program(bundle, enable_etdump=True)
            else:
                module = lib._load_for_executorch(str(path), enable_etdump=True)
    except TypeError as exc:  # an older pybindings without the keyword
        return f"this executorch's pybindings cannot enable ETDump ({exc})"
    if not module.has_etdump():
        return "the pybindings loaded the program without an ETDump event tracer"
    orders = read_program(program_bytes(path)).input_dim_orders
    native = tuple(torch.as_tensor(t).contiguous(memory_format=torch.channels_last)
                   if i < len(orders) and is_channels_last(orders[i]) else torch.as_tensor(t).contiguous()
                   for i, t in enumerate(inputs))
    with quiet_native_stderr():
        for _ in range(warmup + runs):
            module.forward(native)
        module.write_etdump_result_to_file(str(out))
    if not out.is_file() or out.stat().st_size == 0:
        return NO_EVENTS
    return None


def _events(dump: Any) -> list[Any]:
    """Every profile event of every run block, in order."""
    return [e.profile_event for run in dump.run_data for e in (run.events or []) if e.profile_event is not None]


def split_runs(events: Sequence[Any]) -> list[tuple[float, list[Any]]]:
    """(duration of ``Method::execute``, events inside it) per run, in order."""
    executes = [e for e in events if e.name == "Method::execute"]
    runs = []
    for ex in executes:
        inner = [e for e in events if e is not ex and e.start_time >= ex.start_time and e.end_time <= ex.end_time]
        runs.append((float(ex.end_time - ex.start_time), inner))
    return runs


def profile_from_etdump(dump: Any, labels: dict[tuple[int, int], tuple[str, int | None]], path: str, threads: int,
                        warmup: int, backend_names: dict[str, str]) -> TimeProfile:
    """A :class:`TimeProfile` from a deserialized ETDump (``ETDumpFlatCC``) and the program's instruction labels.
    Times are nanoseconds in the dump (the ExecuTorch Linux clock), microseconds in the profile."""
    from mobilize.lowering.graph import op_name

    events = _events(dump)
    all_runs = split_runs(events)
    runs = all_runs[warmup:] or all_runs
    if not runs:
        ops_seen = any(e.name in ("OPERATOR_CALL", "DELEGATE_CALL") for e in events)
        return unavailable(path, "executorch", SOURCE, threads, NO_EXECUTE if ops_seen else NO_EVENTS)
    per_instr: dict[tuple[int, int], list[float]] = collections.defaultdict(list)
    per_delegate_op: dict[tuple[int, str], list[float]] = collections.defaultdict(list)
    for _, events in runs:
        this_instr: dict[tuple[int, int], float] = collections.defaultdict(float)
        this_deleg: dict[tuple[int, str], float] = collections.defaultdict(float)
        for e in events:
            span = float(e.end_time - e.start_time)
            # ETDump writes -1 / "" for unset ids (as the Inspector reads them)
            id_int = e.delegate_debug_id_int if e.delegate_debug_id_int not in (None, -1) else None
            if id_int is not None or e.delegate_debug_id_str:
                name = e.delegate_debug_id_str or f"delegate event {id_int}"
                this_deleg[(e.instruction_id, name)] += span
            elif e.name in ("OPERATOR_CALL", "DELEGATE_CALL"):
                this_instr[(e.chain_index, e.instruction_id)] += span
        for key, ns in this_instr.items():
            per_instr[key].append(ns)
        for key, ns in this_deleg.items():
            per_delegate_op[key].append(ns)
    ops, notes = [], []
    unknown = 0
    for (chain, instr), spans in sorted(per_instr.items()):
        label, delegate_index = labels.get((chain, instr), (None, None))
        us = statistics.median(spans + [0.0] * (len(runs) - len(spans))) / 1e3
        node = f"instruction {instr}" if chain == 0 else f"chain {chain} instruction {instr}"
        if label is None:
            unknown += 1
            ops.append(OpTime("unknown instruction", node, "portable", False, us))
        elif delegate_index is not None:
            name = backend_names.get(label, label)
            ops.append(OpTime(f"{name} delegate call", node, name, True, us))
        else:
            ops.append(OpTime(op_name(label), node, "portable", False, us))
    if unknown:
        notes.append(f"{unknown} timed instruction(s) not found in the program's instruction list")
    delegate_ops = [OpTime(name, f"instruction {instr}", "delegate", True,
                           statistics.median(spans + [0.0] * (len(runs) - len(spans))) / 1e3)
                    for (instr, name), spans in sorted(per_delegate_op.items())]
    backends = {backend_names.get(label, label) for label, index in labels.values() if index is not None}
    delegate = " + ".join(sorted(backends)) or None
    total = statistics.median(d for d, _ in runs) / 1e3
    return TimeProfile(path, "executorch", SOURCE, delegate, threads, len(runs), total, ops, delegate_ops,
                       notes=notes)


def profile_pte(path: Path, inputs: Sequence[Any], threads: int = 1, runs: int = RUNS,
                warmup: int = WARMUP) -> TimeProfile:
    """Time every instruction of a ``.pte``/``.bpte`` on ``inputs`` with ETDump; see the module docstring."""
    from mobilize.backends.executorch.delegation import DelegationReport, delegation_report
    from mobilize.backends.executorch.pte import past_heavy_inits, program_bytes

    path = Path(path)
    try:
        with past_heavy_inits():
            from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
    except ImportError as exc:
        return unavailable(str(path), "executorch", SOURCE, threads,
                           f"executorch.devtools cannot read an ETDump here ({exc})")
    report = delegation_report(path)
    with tempfile.TemporaryDirectory(prefix="mobilize-etdump-") as tmp:
        dump_path = Path(tmp) / "run.etdp"
        why_not = record_etdump(path, inputs, threads, runs, warmup, dump_path)
        if why_not:
            return unavailable(str(path), "executorch", SOURCE, threads, why_not)
        with past_heavy_inits():  # it reads its schema from its package's folder
            dump = deserialize_from_etdump_flatcc(dump_path.read_bytes())
    labels = instruction_labels(program_bytes(path))
    names = {label: DelegationReport(label, None, 0, 0).backend_name for label, index in labels.values()
             if index is not None}
    profile = profile_from_etdump(dump, labels, str(path), threads, warmup, names)
    if profile.available and report.delegated_ops is not None:
        profile.ops_in_delegate, profile.ops_total = report.delegated_ops, report.total_ops
    return profile
