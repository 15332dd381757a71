"""Config dataclasses: build them from plain dicts (YAML/JSON/CLI), with errors that name the step.

    >>> @dataclasses.dataclass(frozen=True)
    ... class FuseConfig:
    ...     inplace: bool = False
    >>> build_config(FuseConfig, {"inplace": True}, "fuse")
    FuseConfig(inplace=True)
    >>> build_config(FuseConfig, {"in_place": True}, "fuse")
    Traceback (most recent call last):
    mobilize.core.errors.ConfigError: step 'fuse' has no option 'in_place' (did you mean: inplace? options: inplace)
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any

from mobilize.core.errors import ConfigError
from mobilize.core.registry import did_you_mean


def build_config(cls: type, options: dict[str, Any] | None, step: str) -> Any:
    options = dict(options or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in options:
        if key not in fields:
            raise ConfigError(f"step '{step}' has no option '{key}'", hint=did_you_mean(key, list(fields), "options", n=1))
    kwargs = {key: _coerce(hints[key], value, step, key) for key, value in options.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad options for step '{step}': {exc}") from exc


def _coerce(hint: Any, value: Any, step: str, key: str) -> Any:
    origin = typing.get_origin(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if value is None:
        return None
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and len(args) == 1:
        hint, origin = args[0], typing.get_origin(args[0])
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise ConfigError(f"step '{step}': bad {key} '{value}'",
                              hint=f"choose one of: {', '.join(str(m.value) for m in hint)}") from None
    if hint is bool and not isinstance(value, bool):
        raise ConfigError(f"step '{step}': {key} must be true or false, got {value!r}")
    if hint in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ConfigError(f"step '{step}': {key} must be a number, got {value!r}")
    if hint is str and not isinstance(value, str):
        raise ConfigError(f"step '{step}': {key} must be a string, got {value!r}")
    if origin in (tuple, list) and not isinstance(value, (list, tuple)):
        raise ConfigError(f"step '{step}': {key} must be a list, got {value!r}")
    if origin is tuple:
        return tuple(value)
    return value


def config_to_dict(config: Any) -> dict[str, Any]:
    """Only the options that differ from the defaults, as plain JSON values."""
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        if value != default:
            out[f.name] = value.value if isinstance(value, enum.Enum) else (list(value) if isinstance(value, tuple) else value)
    return out


def builtin_names(folder: str) -> list[str]:
    """Names of the YAML documents in a package folder (``builtin_recipes``, ``builtin_plans``)."""
    from importlib import resources

    return sorted(p.name[:-5] for p in (resources.files("mobilize") / folder).iterdir() if p.name.endswith(".yaml"))


def load_document(name_or_path: str, folder: str, kind: str) -> tuple[Any, str]:
    """A built-in YAML document by name, or a user's .yaml/.yml/.json file: (parsed data, name)."""
    import json
    from importlib import resources
    from pathlib import Path

    import yaml

    from mobilize.core.errors import UserError

    path = Path(name_or_path)
    if path.suffix.lower() in (".yaml", ".yml", ".json"):
        if not path.is_file():
            raise UserError(f"{kind} file not found: {path}")
        text, name = path.read_text(), path.stem
    else:
        names = builtin_names(folder)
        if name_or_path not in names:
            hint = did_you_mean(name_or_path, names, f"built-in {kind}s", n=2)
            raise ConfigError(f"unknown {kind} '{name_or_path}'", hint=hint + "; or give a .yaml/.json file")
        text, name = (resources.files("mobilize") / folder / f"{name_or_path}.yaml").read_text(), name_or_path
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot parse {kind} {name_or_path}: {str(exc).splitlines()[0]}") from exc
    return data, name
