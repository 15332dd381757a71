"""What the native runner reports about a .pte it timed: the delegation report the Python runtime gives, and
a check that the backends the program calls are registered in the native runtime."""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.backends.executorch.delegation import delegation_report
from mobilize.backends.executorch.pte import program_bytes, read_program


def native_details(target: Any, notes: list[str], registered_backends: Sequence[str]) -> dict[str, Any]:
    """The delegation report the Python runtime gives (read from the file), and a check that the
    backends the program calls are registered in the native runtime."""
    report = delegation_report(target.path)
    warning = report.warning()
    if warning and not any(warning in n for n in notes):
        notes.append(f"executorch: {warning}")
    missing = sorted(set(read_program(program_bytes(target.path)).delegate_calls) - set(registered_backends))
    if missing:  # ExecuTorch would have refused to load; kept as a cross-check
        notes.append(f"native: backends {', '.join(missing)} are called but not registered")
    return {"delegation": report.to_json()}
