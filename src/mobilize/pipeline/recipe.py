"""Recipes: ordered pass configs plus exporter configs plus runtime options; round-trip YAML/JSON.

A step is a name or a one-key mapping of name to options.  Built-in recipes are the YAML
files in ``mobilize/builtin_recipes/`` (file name == recipe name).

    >>> r = load_recipe("seed")
    >>> [s.name for s in r.passes], [s.name for s in r.exports]
    (['fuse', 'quantize'], ['torchscript', 'lite'])
    >>> Recipe.from_dict(r.to_dict()) == r
    True
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from mobilize.core.jsonfile import dumps
from mobilize.core.config import build_config, builtin_names, config_to_dict, load_document
from mobilize.core.errors import ConfigError
from mobilize.core.runtime_options import RuntimeOptions


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    config: Any

    def to_dict(self) -> Any:
        options = config_to_dict(self.config)
        return {self.name: options} if options else self.name


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    passes: tuple[Step, ...] = ()
    exports: tuple[Step, ...] = ()
    runtime: RuntimeOptions = RuntimeOptions()
    description: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "custom", allow_no_export: bool = False) -> "Recipe":
        from mobilize.exporters import EXPORTERS
        from mobilize.passes import PASSES

        if not isinstance(data, dict):
            raise ConfigError(f"recipe '{name}' must be a mapping with 'passes' and 'exports'")
        unknown = set(data) - {"name", "description", "passes", "exports", "runtime"}
        if unknown:
            raise ConfigError(f"recipe '{name}' has unknown key(s): {', '.join(sorted(unknown))}",
                              hint="keys: name, description, passes, exports, runtime")
        passes = tuple(parse_step(PASSES, s, "pass") for s in data.get("passes") or [])
        exports = tuple(parse_step(EXPORTERS, s, "exporter") for s in data.get("exports") or [])
        if not exports and not allow_no_export:
            raise ConfigError(f"recipe '{data.get('name', name)}' has no exports", hint="add e.g. exports: [torchscript]")
        runtime = RuntimeOptions.from_dict(data.get("runtime"))
        from mobilize.core.paths import safe_name

        name = safe_name(data.get("name", name), "recipe name")  # it becomes part of the artifact's file name
        return cls(name, passes, exports, runtime, data.get("description", ""))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "passes": [s.to_dict() for s in self.passes],
            "exports": [s.to_dict() for s in self.exports],
            "runtime": self.runtime.to_dict(),
        }

    def with_option(self, option: str, value: Any) -> "Recipe":
        """Set ``option`` on every step whose config has it (e.g. ``engine`` from ``--engine``)."""

        def update(steps: tuple[Step, ...]) -> tuple[Step, ...]:
            out = []
            for s in steps:
                if any(f.name == option for f in dataclasses.fields(s.config)):
                    options = {**config_to_dict(s.config), option: value}
                    s = Step(s.name, build_config(type(s.config), options, s.name))
                out.append(s)
            return tuple(out)

        changed = dataclasses.replace(self, passes=update(self.passes), exports=update(self.exports))
        if changed == self and not any(
            any(f.name == option for f in dataclasses.fields(s.config)) for s in self.passes + self.exports
        ):
            raise ConfigError(f"recipe '{self.name}' has no step with option '{option}'")
        return changed


def parse_step(registry, raw: Any, kind: str) -> Step:
    """One recipe step as a recipe file writes it (``name`` or ``{name: {options}}``), its options checked."""
    if isinstance(raw, str):
        name, options = raw, {}
    elif isinstance(raw, dict) and len(raw) == 1:
        name, options = next(iter(raw.items()))
        options = options or {}
        if not isinstance(options, dict):
            raise ConfigError(f"options of step '{name}' must be a mapping, got {options!r}")
    else:
        raise ConfigError(f"bad {kind} step {raw!r}", hint="write a name, or a one-key mapping name: {options}")
    _check_section(name, kind)
    plugin = registry.get(name)
    return Step(name, build_config(plugin.Config, options, name))


def _check_section(name: str, kind: str) -> None:
    from mobilize.exporters import EXPORTERS
    from mobilize.passes import PASSES

    if kind == "pass" and name not in PASSES.names() and name in EXPORTERS.names():
        raise ConfigError(f"step '{name}' is an exporter but is listed under passes",
                          hint="move it to exports: exporters run after every pass, so after quantize's convert")
    if kind == "exporter" and name not in EXPORTERS.names() and name in PASSES.names():
        raise ConfigError(f"step '{name}' is a pass but is listed under exports",
                          hint="move it to passes: passes run before any export")


def builtin_recipe_names() -> list[str]:
    return builtin_names("builtin_recipes")


def load_recipe(name_or_path: str) -> Recipe:
    """A built-in recipe name, or a ``.yaml`` / ``.yml`` / ``.json`` file."""
    data, name = load_document(name_or_path, "builtin_recipes", "recipe")
    return Recipe.from_dict(data, name)


def dump_recipe(recipe: Recipe, path: str | Path) -> None:
    import yaml

    from mobilize.core.artifact import atomic_write_text

    data = recipe.to_dict()
    text = dumps(data, indent=2, what=f"the recipe {path}") if str(path).endswith(".json") else yaml.safe_dump(data, sort_keys=False)
    atomic_write_text(path, text)
