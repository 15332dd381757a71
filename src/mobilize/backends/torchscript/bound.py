"""``--input NAME=VALUE`` for a TorchScript file: a forward argument that is not a tensor (``int sr``) gets the value
given, converted to the type the file's schema declares; the session passes it by name on every call.

    >>> import torch
    >>> class Vad(torch.nn.Module):
    ...     def forward(self, x: torch.Tensor, sr: int) -> torch.Tensor:
    ...         return x * sr
    >>> forward_arguments(torch.jit.script(Vad()))
    {'x': 'Tensor', 'sr': 'int'}
"""

from __future__ import annotations

from typing import Any

from mobilize.core.artifact import Artifact
from mobilize.core.errors import ConfigError, UnsupportedModelError, translate_errors


def forward_arguments(module: Any) -> dict[str, str]:
    """The forward's arguments (``self`` left out) and their declared types, as the file's schema says them."""
    return {a.name: str(a.type) for a in module.forward.schema.arguments if a.name != "self"}


def unbound_arguments(module: Any, bound: dict[str, Any]) -> list[str]:
    """The forward's non-tensor arguments without a default that nothing bound (``sr: int``)."""
    return [f"{a.name}: {a.type}" for a in module.forward.schema.arguments
            if a.name != "self" and "Tensor" not in str(a.type) and not a.has_default_value() and a.name not in bound]


def bind_inputs(art: Artifact, bound: dict[str, Any]) -> Artifact:
    """``art`` with ``bound`` checked against its forward's non-tensor arguments and typed as they declare."""
    import torch

    from mobilize.sources.bound import as_declared, bound_file

    if art.format != "torchscript":
        name = next(iter(bound))
        raise ConfigError(f"--input {name}=...: {art.path} is a lite-interpreter file, whose forward takes its inputs "
                          f"by position only, so a value cannot be passed to it by name",
                          hint=f"compare the TorchScript (.pt) file it came from with --input {name}=...: its lite "
                               f"variant has the value bound inside the .ptl")
    with translate_errors(UnsupportedModelError, f"{art.path} is not a loadable TorchScript file"):
        args = forward_arguments(torch.jit.load(str(art.path), map_location="cpu"))
    listed = ", ".join(f"{n}: {t}" for n, t in args.items()) or "none"
    typed = {}
    for name, value in bound.items():
        if name not in args:
            raise ConfigError(f"--input {name}=...: the forward of {art.path} has no argument '{name}'",
                              hint=f"its arguments: {listed}")
        if "Tensor" in args[name]:
            raise ConfigError(f"--input {name}=...: '{name}' is a tensor input of the forward of {art.path}; --input "
                              f"binds only its int, float, bool and str arguments", hint=f"its arguments: {listed}")
        typed[name] = as_declared(name, value, args[name])
    return bound_file(art, typed)
