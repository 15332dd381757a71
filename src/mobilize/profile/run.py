"""``profile_file``: the time-weighted profile of any file whose engine has a profiler (``Backend.profilers``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from mobilize.profile.core import TimeProfile


def _profilable_suffixes() -> str:
    """``.pte, .bpte or .onnx``: the suffixes of every format an engine profiles."""
    from mobilize.backends import profilable_formats, suffixes

    found = [s for s, fmt in suffixes().items() if fmt in profilable_formats()]
    return ", ".join(found[:-1]) + f" or {found[-1]}" if len(found) > 1 else "".join(found)


def check_profilable(path: str | Path) -> str:
    """The file's format name when it can be profiled; a one-line ConfigError otherwise."""
    from mobilize.core.artifact import format_for_path
    from mobilize.core.errors import ConfigError

    if not Path(path).is_file():
        raise ConfigError(f"--profile needs an artifact file, not '{path}'",
                          hint=f"give a {_profilable_suffixes()} file (mobilize optimize writes one)")
    from mobilize.backends import profilable_formats

    fmt = str(format_for_path(path))
    if fmt not in profilable_formats():
        raise ConfigError(f"no per-op profiler for {fmt} files ({path})",
                          hint=f"the engines here profile {_profilable_suffixes()} files")
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
    from mobilize.core.artifact import Artifact
    from mobilize.runtimes.base import open_session

    with open_session(Artifact.from_file(path), threads=1) as session:
        return session.example_inputs(seed)


def time_notes(path: str | Path, inputs: Sequence[Any] | None = None, threads: int = 1,
               details: dict[str, Any] | None = None, runs: int | None = None) -> list[str]:
    """The notes that weigh a file's ops by time where its engine profiles every file (``Backend.compare_profile``:
    ExecuTorch's ETDump, cheap enough for every optimize and compare): the WARNING when a few ops outside the
    delegate dominate, else where the time goes.  Any other file gets one line saying that the op count alone does
    not show time.  ``details`` receives the profile's JSON."""
    from mobilize.core.artifact import format_for_path
    from mobilize.core.backend import profiled_every_file
    from mobilize.core.errors import MobilizeError

    if not profiled_every_file(format_for_path(path)):
        return [f"time profile: not taken for {Path(path).name}; an op count alone does not show where the time "
                f"goes (`mobilize bench {Path(path).name} --profile` weighs the ops of {_profilable_suffixes()} "
                f"files by time)"]
    try:
        profile = profile_file(path, inputs, threads=threads, runs=runs, warmup=None if runs is None else 1)
    except (MobilizeError, RuntimeError, OSError) as exc:
        return [f"time profile: not taken: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"]
    if details is not None:
        details["time_profile"] = profile.to_json()
    if not profile.available:
        return [f"time profile: unavailable: {profile.reason}"]
    warning = profile.warning()
    if warning:
        return [warning]
    if not profile.delegate:
        return [f"time profile ({profile.source}): no delegate, every op on the runtime's own kernels"]
    return [f"time profile ({profile.source}, as `mobilize bench --profile` takes it): "
            f"{profile.inside_percent:.0f}% of the time inside {profile.delegate}'s ops, "
            f"{profile.outside_percent:.0f}% in ops outside it, {profile.percent(profile.overhead_us):.0f}% in the "
            f"runtime between ops"]
