"""Input specs in ``speed_benchmark_torch`` syntax, and the tensors made from them.

One syntax for every command: ``--input_dims`` lists one shape per tensor input (``;`` between
inputs, ``()`` for a scalar), ``--input_type`` one element type per input, and ``--input
name=value`` binds a non-tensor forward argument (an ``int``, ``float``, ``bool`` or string).

    >>> from mobilize.core.inputs import parse_input_specs, parse_bound_args, shape_text
    >>> specs = parse_input_specs("1,3,224,224;1,10;()", "float;int64;float")
    >>> [(s.shape, s.dtype) for s in specs]
    [((1, 3, 224, 224), 'float'), ((1, 10), 'int64'), ((), 'float')]
    >>> shape_text(()), shape_text((1, 128)), str(specs[1])
    ('()', '(1,128)', '(1,10) int64')
    >>> parse_bound_args(["sr=16000", "mode=fast", "norm=true"])
    {'sr': 16000, 'mode': 'fast', 'norm': True}
    >>> [tuple(t.shape) for t in make_random_inputs(specs, seed=0)]
    [(1, 3, 224, 224), (1, 10), ()]
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
from typing import Any, Sequence

from mobilize.core.errors import ConfigError


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
        fmt = "" if self.memory_format == MemoryFormat.CONTIGUOUS else f" {self.memory_format}"
        return f"{shape_text(self.shape)} {self.dtype}{fmt}"


def shape_text(shape: Sequence[int]) -> str:
    """A shape as errors and reports print it: ``()`` for a scalar, ``(1,128)``; unknown dims as ``?``."""
    return "(" + ",".join("?" if d is None or d < 0 else str(d) for d in shape) + ")"


def out_of_range(values: Any, dtype: str) -> str:
    """'' when every value (a number or an array) fits element type ``dtype`` (``--input_type`` or numpy spelling),
    else the first that does not and the type's range: a cast would wrap it, or make it infinite, without a word.

        >>> out_of_range(300, "uint8")
        '300 is outside uint8 (0 to 255)'
        >>> out_of_range([1.0, 2.5], "float16"), out_of_range(-(2**63), "int64")
        ('', '')
        >>> out_of_range(99999999999999999999999, "long")
        '99999999999999999999999 is outside int64 (-9223372036854775808 to 9223372036854775807)'
    """
    import numpy as np

    name = _DTYPES.get(dtype, dtype)
    if name == "bool":
        return ""
    info = np.finfo(np.float32 if name == "bfloat16" else name) if "float" in name else np.iinfo(name)
    if isinstance(values, (int, float)):  # a Python number may be past every array type (10**23)
        extremes = [values]
    else:
        arr = np.asarray(values)
        if arr.size == 0 or arr.dtype.kind not in "iuf":
            return ""
        finite = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr.ravel()
        if "int" in name and finite.size < arr.size:
            return f"{arr[~np.isfinite(arr)].flat[0]} is not a number {name} holds"
        extremes = [finite.min().item(), finite.max().item()] if finite.size else []
    for value in extremes:
        if "int" in name and not math.isfinite(value):
            return f"{value} is not a number {name} holds"
        low, high = (float(info.min), float(info.max)) if "float" in name else (int(info.min), int(info.max))
        if math.isfinite(value) and not low <= value <= high:
            return f"{value} is outside {name} ({low:g} to {high:g})" if "float" in name else \
                f"{value} is outside {name} ({low} to {high})"
    return ""


def parse_bound_args(items: Sequence[str] | None) -> dict[str, Any]:
    """``--input name=value`` (repeatable): non-tensor forward arguments, bound by name.  Values parse as
    int, float, true/false/none, else stay strings; the forward's own annotation or default then decides the type
    (:func:`mobilize.sources.bound.bind_arguments`).  An empty value and a number that is not finite (``nan``,
    ``inf``, ``1e400``) are refused here: no forward argument means them, and JSON cannot record them."""
    bound: dict[str, Any] = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise ConfigError(f"bad --input '{item}'", hint="give name=value for a non-tensor forward argument, "
                                                            "e.g. --input sr=16000")
        if name in bound:
            raise ConfigError(f"--input {name} is given twice")
        if not text.strip():
            raise ConfigError(f"--input {name}= has no value", hint=f"give one, e.g. --input {name}=16000")
        bound[name] = _python_value(text.strip())
        if isinstance(bound[name], float) and not math.isfinite(bound[name]):
            raise ConfigError(f"--input {item}: {text.strip()} is not a finite number",
                              hint="give a finite number: NaN and infinities cannot be recorded in a manifest")
    return bound


def _python_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


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
        inner = group[1:-1].strip() if group.startswith("(") and group.endswith(")") else group
        try:
            shape = tuple(int(d) for d in inner.split(",") if d.strip()) if inner else ()
        except ValueError:
            raise ConfigError(
                f"bad --input_dims '{input_dims}': '{group}' is not a comma-separated list of integers",
                hint='example: --input_dims "1,3,224,224;1,10" (a scalar input is "()")',
            ) from None
        if not inner and group != "()":
            raise ConfigError(f"bad --input_dims '{input_dims}': an empty shape", hint='a scalar input is written "()"')
        if any(d <= 0 for d in shape):
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
