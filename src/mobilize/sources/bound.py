"""Non-tensor forward arguments (``--input sr=16000``) bound by name, so every exporter sees a module
whose inputs are tensors only; what was bound is recorded in the manifest of each file built from it.

    >>> import torch
    >>> class Vad(torch.nn.Module):
    ...     def forward(self, x, sr: int = 8000):
    ...         return x * (2.0 if sr == 16000 else 1.0)
    >>> m = bind_arguments(Vad(), {"sr": 16000}, "vad.py:Vad")
    >>> m(torch.ones(1)).item(), m.forward_names, m.bound_args
    (2.0, ['x'], {'sr': 16000})
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Mapping, Sequence

import torch

from mobilize.core.errors import ConfigError
from mobilize.core.inputs import InputSpec, out_of_range


class BoundArguments(torch.nn.Module):
    """``module`` with ``bound_args`` passed by keyword on every call; the tensors stay positional."""

    def __init__(self, module: torch.nn.Module, bound_args: Mapping[str, Any], forward_names: list[str]):
        super().__init__()
        self.model = module
        self.bound_args = dict(bound_args)
        self.forward_names = list(forward_names)
        """The forward's tensor parameters, in order (the bound ones left out)."""

    def forward(self, *tensors: Any) -> Any:
        return self.model(*tensors, **self.bound_args)


def forward_parameters(module: Any) -> tuple[list[str], bool]:
    """The forward's positional parameter names, and whether it takes ``**kwargs``."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return [], True
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return names, any(p.kind == p.VAR_KEYWORD for p in params)


def tensor_input_names(module: Any, count: int) -> list[str]:
    """The names of a module's first ``count`` tensor inputs (to match .npz arrays by name); ``[]`` when the
    forward has fewer named parameters (``*args``)."""
    params = getattr(module, "forward_names", None) or forward_parameters(module)[0]
    return params[:count] if len(params) >= count else []


def bind_arguments(module: torch.nn.Module, bound_args: Mapping[str, Any], reference: str) -> torch.nn.Module:
    """``module`` itself when nothing is bound; else a :class:`BoundArguments` wrapper, after checking
    that every name is one of the forward's non-tensor parameters and converting each value to the type its
    annotation (else its default) says: int, float, bool or str."""
    if not bound_args:
        return module
    names, var_keyword = forward_parameters(module)
    unknown = [n for n in bound_args if n not in names and not var_keyword]
    if unknown:
        raise ConfigError(f"--input {unknown[0]}=...: the forward of '{reference}' has no argument '{unknown[0]}'",
                          hint=f"its arguments: {', '.join(names) or 'none'}")
    params = _parameters(module)
    tensors = _tensor_parameters(params, bound_args)
    for name in bound_args:
        if name in tensors:
            raise ConfigError(f"--input {name}=...: '{name}' is a tensor input of the forward of '{reference}'; "
                              f"--input binds only its non-tensor arguments",
                              hint=f"leave --input {name} out")
    typed = {name: _convert(name, value, params.get(name)) for name, value in bound_args.items()}
    wrapped = BoundArguments(module, typed, [n for n in names if n not in bound_args])
    return wrapped.eval() if not module.training else wrapped


def as_declared(name: str, value: Any, declared: str) -> Any:
    """``value`` (as ``--input`` parsed it) as a file's declared type for ``name`` (``int``, ``float``, ``bool``,
    ``str``, ``Optional[int]`` ...); a value that type cannot hold is a one-line ConfigError naming ``--input``.

        >>> as_declared("sr", 16000.0, "int"), as_declared("gain", 2, "float")
        (16000, 2.0)
    """
    param = inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=declared)
    return _convert(name, value, param)


def random_scalar_notes(specs: Sequence[InputSpec], names: Sequence[str], samples: Sequence[Sequence[Any]]) -> list[str]:
    """A note for each floating input of rank 0 (a gain, a temperature) that the samples feed seeded random values,
    naming the values and the ``--input NAME=VALUE`` that sets one (an integer one is refused, not fed).

        >>> import torch
        >>> from mobilize.core.inputs import InputSpec, out_of_range
        >>> notes = random_scalar_notes([InputSpec((1, 4)), InputSpec((), "float")], ["x", "gain"],
        ...                             [[torch.zeros(1, 4), torch.tensor(v)] for v in (0.5, -1.25)])
        >>> print(notes[0])
        inputs: 'gain' (a 0-d float input) got no --input value: fed seeded random values 0.5, -1.25 (one per sample, ...
    """
    notes = []
    for k, spec in enumerate(specs):
        if spec.shape or not spec.torch_dtype.is_floating_point:
            continue
        name = names[k] if k < len(names) and names[k] else f"input {k}"
        shown = ", ".join(f"{float(s[k]):.4g}" for s in samples[:3]) + (", ..." if len(samples) > 3 else "")
        notes.append(f"inputs: '{name}' (a 0-d {spec.dtype} input) got no --input value: fed seeded random values "
                     f"{shown} (one per sample, drawn from N(0, 1)), which may not be a value the model is used with; "
                     f"set it with --input {name}=VALUE")
    return notes


def bound_file(art: Any, typed: Mapping[str, Any], data: bytes | None = None, note: str = "") -> Any:
    """A copy of file ``art`` (or ``data``, the engine's rewrite of it) with ``typed`` recorded in its manifest, so
    every process that loads it again (the shared timing host included) feeds the same values.  The copy lives in
    this process's folder of bound copies (:func:`bound_folder`), named after the file's content and the values: a
    second bind of the same file in one process finds the same one."""
    import hashlib
    import json

    from mobilize.core.artifact import Artifact, atomic_write_bytes, sha256_of

    key = hashlib.sha256(f"{sha256_of(art.path)} {json.dumps(dict(typed), sort_keys=True)}".encode()).hexdigest()
    path = bound_folder() / f"{art.path.stem}-{key[:16]}{art.path.suffix}"
    copy = Artifact(path=path, format=art.format, input_specs=list(art.input_specs), recipe=art.recipe,
                    notes=[*art.notes, *([note] if note else [])], bound_args=dict(typed))
    if not path.exists() or not copy.manifest_path.exists():
        atomic_write_bytes(path, data if data is not None else art.path.read_bytes())
        copy.write_manifest()
    return Artifact.from_file(path, format=art.format)


_FOLDERS: dict[int, Any] = {}
"""Each process's folder of bound copies, by process id (a forked child makes its own)."""


def bound_folder() -> Any:
    """This process's folder of bound copies, ``mobilize-bound-PID-...`` in the temp folder: removed when the process
    exits; inside a child, in the child's own temp folder, which its parent removes however the child ended; left by
    a killed process, removed by the next run (:func:`mobilize.core.paths.remove_stale`)."""
    import atexit
    import os

    from mobilize.core.paths import make_temp_dir

    pid = os.getpid()
    if pid not in _FOLDERS or not _FOLDERS[pid].is_dir():
        folder = _FOLDERS[pid] = make_temp_dir("bound")
        atexit.register(_remove_folder, folder, pid)
    return _FOLDERS[pid]


def _remove_folder(folder: Any, pid: int) -> None:
    """At exit: the folder of bound copies, by the process that made it only (a forked child inherits the hook)."""
    import os
    import shutil

    if os.getpid() == pid:
        shutil.rmtree(folder, ignore_errors=True)


def _parameters(module: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return {}


def _annotation(param: inspect.Parameter | None) -> Any:
    """The parameter's declared type (a string under ``from __future__ import annotations``), else its default's
    type, else None."""
    if param is None:
        return None
    if param.annotation is not param.empty:
        return param.annotation
    default = param.default
    return type(default) if default is not param.empty and default is not None else None


def _tensor_parameters(params: Mapping[str, inspect.Parameter], bound: Mapping[str, Any]) -> set[str]:
    """The parameters the tensors fill: annotated as a Tensor, or positional ones the positional tensors reach (every
    positional parameter before the last one that is neither bound nor defaulted; the first one always, unless
    every positional parameter is bound)."""
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    needed = [i for i, p in enumerate(positional) if p.name not in bound and p.default is p.empty]
    reach = needed[-1] + 1 if needed else 0
    if positional and positional[0].default is positional[0].empty and not all(p.name in bound for p in positional):
        reach = max(reach, 1)
    found = {p.name for p in positional[:reach]}
    for p in params.values():
        if "Tensor" in str(p.annotation) and p.annotation is not p.empty:
            found.add(p.name)
    return found


def _convert(name: str, value: Any, param: inspect.Parameter | None) -> Any:
    """``value`` (as ``--input`` parsed it) as the type the forward declares for ``name``; a value that type cannot
    hold is a one-line ConfigError naming ``--input``."""
    label = _type_name(_annotation(param))
    if label is None or value is None:  # no declared type we know: the value as it was typed
        return value
    given = f"--input {name}={_text(value)}"
    if label == "str":
        return _text(value)
    if label == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ConfigError(f"{given}: the forward's '{name}' is a bool; give true or false")
    if isinstance(value, bool) or isinstance(value, str):
        raise ConfigError(f"{given}: the forward's '{name}' is {'an' if label == 'int' else 'a'} {label}; "
                          f"{_text(value)!r} is not a number")
    if label == "int":
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{given}: the forward's '{name}' is an int; {value!r} is not a whole number")
        if out_of_range(int(value), "int64"):  # TorchScript, ExecuTorch and ONNX all keep an int in 64 bits
            raise ConfigError(f"{given}: the forward's '{name}' is an int, which every file keeps in 64 bits: "
                              f"{-2**63} to {2**63 - 1}")
        return int(value)
    return float(value)


def _type_name(kind: Any) -> str | None:
    """``int``, ``float``, ``bool`` or ``str`` for a declared type of one of them (``Optional[int]``, ``"int | None"``
    and the string forms included), else None."""
    if isinstance(kind, type):
        return kind.__name__ if kind in (int, float, bool, str) else None
    parts = {p for p in re.split(r"[\[\]|,\s]+", str(kind).replace("typing.", ""))
             if p and p not in ("Optional", "None", "NoneType")}
    return parts.pop() if len(parts) == 1 and parts <= {"int", "float", "bool", "str"} else None


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
