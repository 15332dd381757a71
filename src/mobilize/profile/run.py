"""``profile_file``: the time-weighted profile of any profilable file (``.pte``/``.bpte``, ``.onnx``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from mobilize.profile.core import TimeProfile

def check_profilable(path: str | Path) -> str:
    """The file's format name when it can be profiled; a one-line ConfigError otherwise."""
    from mobilize.artifact import format_for_path
    from mobilize.errors import ConfigError

    if not Path(path).is_file():
        raise ConfigError(f"--profile needs an artifact file, not '{path}'",
                          hint="give a .pte, .bpte or .onnx file (mobilize optimize writes one)")
    from mobilize.backends import profilable_formats

    fmt = str(format_for_path(path))
    if fmt not in profilable_formats():
        raise ConfigError(f"no per-op profiler for {fmt} files ({path})",
                          hint="profiles come from ETDump (.pte, .bpte) and the ONNX Runtime profiler (.onnx)")
    return fmt


def profile_file(path: str | Path, inputs: Sequence[Any] | None = None, threads: int = 1, runs: int | None = None,
                 warmup: int | None = None, seed: int = 0) -> TimeProfile:
    """Per-op times of ``path`` on ``inputs`` (None: seeded random inputs of the file's declared shapes)."""
    from mobilize.backends import profiler_for

    fmt = check_profilable(path)
    if inputs is None:
        inputs = _example_inputs(path, seed)
    options = {k: v for k, v in (("runs", runs), ("warmup", warmup)) if v is not None}
    return profiler_for(fmt)(Path(path), inputs, threads, **options)


def _example_inputs(path: str | Path, seed: int) -> list:
    from mobilize.artifact import Artifact
    from mobilize.runtimes.base import open_session

    with open_session(Artifact.from_file(path), threads=1) as session:
        return session.example_inputs(seed)
