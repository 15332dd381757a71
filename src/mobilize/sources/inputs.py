"""Input specs in ``speed_benchmark_torch`` syntax, and the tensors made from them.

    >>> from mobilize.sources.inputs import parse_input_specs
    >>> specs = parse_input_specs("1,3,224,224;1,10", "float;int64")
    >>> [(s.shape, s.dtype) for s in specs]
    [((1, 3, 224, 224), 'float'), ((1, 10), 'int64')]
    >>> [tuple(t.shape) for t in make_random_inputs(specs, seed=0)]
    [(1, 3, 224, 224), (1, 10)]
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
from typing import Any, Sequence

from mobilize.errors import ConfigError


class MemoryFormat(enum.StrEnum):
    CONTIGUOUS = "contiguous_format"
    CHANNELS_LAST = "channels_last"


# speed_benchmark_torch spellings first; aliases users type.
_DTYPES = {
    "float": "float32", "float32": "float32", "half": "float16", "float16": "float16",
    "double": "float64", "float64": "float64", "int64": "int64", "long": "int64",
    "int32": "int32", "int": "int32", "int16": "int16", "uint8": "uint8", "int8": "int8", "bool": "bool",
    "bfloat16": "bfloat16",
}


def input_type_name(torch_dtype_name: str) -> str:
    """A torch dtype name (``float32``, ``torch.int64``) in ``--input_type`` spelling (``float``, ``int64``)."""
    name = str(torch_dtype_name).replace("torch.", "")
    return "float" if name == "float32" else name


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One model input: its shape, element type and memory format."""

    shape: tuple[int, ...]
    dtype: str = "float"
    """Element type in ``--input_type`` spelling: float, int64, uint8, ..."""
    memory_format: MemoryFormat = MemoryFormat.CONTIGUOUS

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "memory_format": str(self.memory_format)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "InputSpec":
        return cls(tuple(int(d) for d in data["shape"]), data.get("dtype", "float"),
                   MemoryFormat(data.get("memory_format", MemoryFormat.CONTIGUOUS)))

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, _DTYPES[self.dtype])

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        fmt = "" if self.memory_format == MemoryFormat.CONTIGUOUS else f" {self.memory_format}"
        return f"{dims} {self.dtype}{fmt}"


def parse_input_specs(
    input_dims: str, input_type: str | None = None, memory_format: str | None = None
) -> list[InputSpec]:
    """Parse ``--input_dims "1,3,224,224;1,10" --input_type "float;int64"``."""
    if not input_dims or not input_dims.strip():
        raise ConfigError("--input_dims is empty", hint='example: --input_dims "1,3,224,224"')
    groups = [g.strip() for g in input_dims.split(";")]
    types = [t.strip() for t in (input_type or "").split(";")] if input_type else ["float"] * len(groups)
    if len(types) == 1 and len(groups) > 1:
        types = types * len(groups)
    if len(types) != len(groups):
        raise ConfigError(
            f"--input_type has {len(types)} entries but --input_dims has {len(groups)}",
            hint="give one type per input, separated by ';'",
        )
    try:
        fmt = MemoryFormat(memory_format or MemoryFormat.CONTIGUOUS)
    except ValueError:
        raise ConfigError(
            f"bad --input_memory_format '{memory_format}'",
            hint=f"choose one of: {', '.join(m.value for m in MemoryFormat)}",
        ) from None
    specs = []
    for group, dtype in zip(groups, types):
        try:
            shape = tuple(int(d) for d in group.split(","))
        except ValueError:
            raise ConfigError(
                f"bad --input_dims '{input_dims}': '{group}' is not a comma-separated list of integers",
                hint='example: --input_dims "1,3,224,224;1,10"',
            ) from None
        if not shape or any(d <= 0 for d in shape):
            raise ConfigError(f"bad --input_dims '{input_dims}': dimensions must be positive integers")
        if dtype not in _DTYPES:
            raise ConfigError(f"bad --input_type '{dtype}'", hint=f"choose one of: {', '.join(_DTYPES)}")
        spec_fmt = fmt if len(shape) == 4 else MemoryFormat.CONTIGUOUS
        specs.append(InputSpec(shape, dtype, spec_fmt))
    check_allocatable(specs)
    return specs


_ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4, "int16": 2,
                  "uint8": 1, "int8": 1, "bool": 1}


def input_bytes(specs: Sequence[InputSpec]) -> int:
    """The memory the inputs themselves take (one tensor per spec)."""
    return sum(math.prod(s.shape) * _ELEMENT_BYTES[_DTYPES[s.dtype]] for s in specs)


def available_memory_bytes() -> int | None:
    """Memory the kernel says a new allocation can get now (MemAvailable), else the physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_allocatable(specs: Sequence[InputSpec]) -> None:
    """Refuse inputs that cannot fit in this machine's memory, before anything is allocated."""
    need = input_bytes(specs)
    have = available_memory_bytes()
    if have is not None and need > have:
        dims = "; ".join(str(s) for s in specs)
        raise ConfigError(f"cannot allocate {need / 1e9:.1f} GB for the inputs [{dims}]: this machine has "
                          f"{have / 1e9:.1f} GB available", hint="give smaller --input_dims")


def make_random_inputs(specs: Sequence[InputSpec], seed: int = 0) -> list:
    """Seeded random tensors: floats ~ N(0,1), integers in [0, 10), uint8 in [0, 256)."""
    import torch

    check_allocatable(specs)
    gen = torch.Generator().manual_seed(seed)
    tensors = []
    for spec in specs:
        dtype = spec.torch_dtype
        if dtype.is_floating_point:
            t = torch.randn(spec.shape, generator=gen).to(dtype)
        elif dtype == torch.bool:
            t = torch.randint(0, 2, spec.shape, generator=gen).bool()
        elif dtype == torch.uint8:
            t = torch.randint(0, 256, spec.shape, generator=gen, dtype=torch.uint8)
        else:
            t = torch.randint(0, 10, spec.shape, generator=gen, dtype=dtype)
        tensors.append(apply_memory_format(t, spec))
    return tensors


def apply_memory_format(tensor, spec: InputSpec):
    import torch

    if spec.memory_format == MemoryFormat.CHANNELS_LAST and tensor.dim() == 4:
        return tensor.contiguous(memory_format=torch.channels_last)
    return tensor
