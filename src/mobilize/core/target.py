"""The device an artifact is built for, and the CPU of the machine that builds it.

CPU-dependent choices (ONNX Runtime's ``reduce_range``, the eager int8 engine) follow the
*target*, never silently the build machine: ``--target host`` (the default) uses this CPU and
says so; ``arm64``, ``x86-avx2`` and ``x86-vnni`` give the same file on any build machine.

    >>> t = Target.parse("x86-avx2")
    >>> t.reduce_range, t.int8_engine
    (True, 'x86')
    >>> Target.parse("arm64").reduce_range
    False
    >>> t.int8_feature()
    '--target x86-avx2 (an x86-64 CPU without VNNI: none of avx512_vnni, avx_vnni, amx_int8)'
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
from typing import Any

from mobilize.core.errors import ConfigError

TARGETS = ("host", "arm64", "x86-avx2", "x86-vnni")
CHOSE = "mobilize chose: "
"""Prefix of a note where mobilize departs from a stock tool's default because of the target CPU; compare and tune
repeat these notes in their summaries (what mobilize did better, and why)."""
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
"""CPU flags of x86 int8 dot-product instructions (u8 x s8 products summed in 32 bits, no 16-bit saturation)."""


@dataclasses.dataclass(frozen=True)
class CpuInfo:
    """What the build (or benchmark) machine's CPU is: recorded in every manifest and report."""

    model: str
    arch: str
    cores: int
    flags: tuple[str, ...]
    """The instruction-set flags that decide int8 kernels (avx2, avx512f, avx512_vnni, avx_vnni, amx_int8, asimddp, ...)."""

    @property
    def has_vnni(self) -> bool:
        return any(f in self.flags for f in VNNI_FLAGS)

    def describe(self) -> str:
        return f"{self.model} ({self.arch}, {self.cores} cores; {' '.join(self.flags) or 'no int8 extensions found'})"

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "arch": self.arch, "cores": self.cores, "flags": list(self.flags)}


_INTERESTING = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile",
                "fma", "f16c", "asimd", "asimddp", "i8mm", "sve", "bf16")


@functools.cache
def host_cpu() -> CpuInfo:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model", "Hardware") and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return CpuInfo(model or "unknown", platform.machine(), cores, tuple(f for f in _INTERESTING if f in flags))


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    arch: str
    """x86_64 or arm64."""
    vnni: bool
    """int8 dot-product instructions (VNNI on x86, SDOT on arm64): no 16-bit saturation in u8s8 kernels."""

    @classmethod
    def parse(cls, name: str | None) -> "Target":
        name = (name or "host").strip().lower()
        if name == "host":
            cpu = host_cpu()
            arm = cpu.arch.lower() in ("aarch64", "arm64")
            return cls("host", "arm64" if arm else "x86_64", True if arm else cpu.has_vnni)
        if name == "arm64":
            return cls(name, "arm64", True)
        if name == "x86-avx2":
            return cls(name, "x86_64", False)
        if name == "x86-vnni":
            return cls(name, "x86_64", True)
        raise ConfigError(f"unknown target '{name}'", hint=f"choose one of: {', '.join(TARGETS)}")

    @property
    def reduce_range(self) -> bool:
        """7-bit weights for the x64 u8s8 kernels without VNNI, which sum pairs of 8-bit products in int16
        (vpmaddubsw) and saturate: ONNX Runtime's ``reduce_range``, NNCF's ``OverflowFix.ENABLE`` for OpenVINO."""
        return self.arch == "x86_64" and not self.vnni

    @property
    def int8_engine(self) -> str:
        """The eager int8 kernel library for this target: qnnpack on ARM, x86 (fbgemm + onednn) on x86."""
        return "qnnpack" if self.arch == "arm64" else "x86"

    def int8_feature(self) -> str:
        """The CPU feature that decides the int8 choices (ONNX ``reduce_range``, NNCF's overflow fix), named as the
        notes name it."""
        if self.name != "host":
            what = ("arm64, int8 dot products" if self.arch == "arm64" else
                    f"an x86-64 CPU {'with VNNI' if self.vnni else 'without VNNI: none of ' + ', '.join(VNNI_FLAGS)}")
            return f"--target {self.name} ({what})"
        cpu = host_cpu()
        if self.arch == "arm64":
            return f"this CPU is arm64 ({cpu.model}): int8 dot products"
        found = [f for f in VNNI_FLAGS if f in cpu.flags]
        return (f"this CPU ({cpu.model}) has {', '.join(found)}" if found else
                f"this CPU ({cpu.model}) has none of {', '.join(VNNI_FLAGS)} (no VNNI)")

    def describe(self) -> str:
        what = f"{self.arch}{', int8 dot-product' if self.vnni else ', no int8 dot-product'}"
        return f"{self.name} ({what})" + (f" = this machine: {host_cpu().model}" if self.name == "host" else "")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arch": self.arch, "vnni": self.vnni}


def host_target() -> Target:
    return Target.parse("host")
