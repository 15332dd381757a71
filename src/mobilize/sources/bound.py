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
from typing import Any, Mapping

import torch

from mobilize.core.errors import ConfigError


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
    that every name is one of the forward's parameters."""
    if not bound_args:
        return module
    names, var_keyword = forward_parameters(module)
    unknown = [n for n in bound_args if n not in names and not var_keyword]
    if unknown:
        raise ConfigError(f"--input {unknown[0]}=...: the forward of '{reference}' has no argument '{unknown[0]}'",
                          hint=f"its arguments: {', '.join(names) or 'none'}")
    wrapped = BoundArguments(module, bound_args, [n for n in names if n not in bound_args])
    return wrapped.eval() if not module.training else wrapped
