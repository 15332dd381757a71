"""The hardware fingerprint every sweep result records, and the key that ``--resume`` matches on.

Timings are only comparable on the same hardware with the same software: the fingerprint is the
CPU (model, arch, instruction-set flags), its cores, the threads the runtimes used and the
runtime versions; a ratio of two latencies is only ever taken inside one fingerprint.

    >>> fp = host_fingerprint(threads=1)
    >>> fp["threads"], len(fingerprint_id(fp))
    (1, 12)
"""

from __future__ import annotations

import hashlib
import json
import platform
from typing import Any

BASE_VERSIONED = ("mobilize", "torch", "numpy")
"""Beside every engine's declared packages (``Backend.packages``): what a compare builds or how fast it runs
depends on these versions."""


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that decide a result (None: not installed)."""
    from importlib import metadata

    from mobilize.core.backend import engine_packages
    from mobilize.core.packages import pip_name

    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in (*BASE_VERSIONED, *engine_packages()):
        try:
            versions[name] = metadata.version(pip_name(name))
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def host_fingerprint(threads: int | None = None) -> dict[str, Any]:
    """This machine: CPU model, arch, flags, cores, the threads a compare uses, runtime versions."""
    from mobilize.core.checks import default_threads
    from mobilize.core.target import host_cpu

    cpu = host_cpu()
    return {"cpu_model": cpu.model, "arch": cpu.arch, "cpu_flags": sorted(cpu.flags), "cores": cpu.cores,
            "threads": threads or default_threads(), "versions": package_versions()}


def digest(value: Any, length: int = 12) -> str:
    """A short, stable hash of a JSON-able value."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def fingerprint_id(fingerprint: dict[str, Any]) -> str:
    return digest(fingerprint)


class FingerprintMismatch(ValueError):
    """Two latencies from different hardware or software were about to be divided."""


def same_fingerprint(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return fingerprint_id(a) == fingerprint_id(b)


def latency_ratio(slower_ms: float, faster_ms: float, fp_slower: dict[str, Any], fp_faster: dict[str, Any]) -> float:
    """``slower_ms / faster_ms``, refused (FingerprintMismatch) when the two were timed on different fingerprints."""
    if not same_fingerprint(fp_slower, fp_faster):
        raise FingerprintMismatch(f"latencies from fingerprint {fingerprint_id(fp_slower)} and "
                                  f"{fingerprint_id(fp_faster)} are not comparable: no ratio across machines")
    return slower_ms / faster_ms
