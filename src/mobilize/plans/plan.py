"""Plans: a named list of variants; a variant is a recipe with at most one export, plus a runtime.

Built-in plans are the YAML files in ``mobilize/builtin_plans/`` (file name == plan name).
A variant names a built-in recipe (``recipe: onnx-int8``) or lists its own ``passes`` /
``exports``; with no export it runs in the eager runtime after its passes.

    >>> plan = load_plan("default")
    >>> [v.name for v in plan.variants][:3]
    ['eager-fp32', 'fused', 'channels-last']
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mobilize.core.config import builtin_names, load_document
from mobilize.core.registry import did_you_mean
from mobilize.core.errors import ConfigError
from mobilize.core.paths import safe_name
from mobilize.pipeline.recipe import Recipe, load_recipe


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    recipe: Recipe
    runtime: str | None = None
    """Runtime name (default: the one for the exported format, eager without export)."""

    @property
    def export(self):
        return self.recipe.exports[0] if self.recipe.exports else None

    def to_dict(self) -> dict[str, Any]:
        data = {"name": self.name, **{k: v for k, v in self.recipe.to_dict().items() if k in ("passes", "exports")}}
        if self.recipe.to_dict().get("runtime"):
            data["runtime_options"] = self.recipe.to_dict()["runtime"]
        if self.runtime:
            data["runtime"] = self.runtime
        return data

    @classmethod
    def from_dict(cls, data: Any) -> "Variant":
        if isinstance(data, str):
            data = {"name": data, "recipe": data}
        if not isinstance(data, dict) or "name" not in data:
            raise ConfigError(f"bad variant {data!r}", hint="a variant is a mapping with at least 'name'")
        name = safe_name(data["name"], "variant name")  # it becomes the variant's folder
        unknown = set(data) - {"name", "recipe", "passes", "exports", "runtime", "runtime_options"}
        if unknown:
            raise ConfigError(f"variant '{name}' has unknown key(s): {', '.join(sorted(unknown))}",
                              hint="keys: name, recipe, passes, exports, runtime, runtime_options")
        if "recipe" in data and ("passes" in data or "exports" in data):
            raise ConfigError(f"variant '{name}' gives both a recipe and its own passes/exports; keep one")
        if "recipe" in data:
            recipe = load_recipe(str(data["recipe"]))
        else:
            recipe = Recipe.from_dict({"passes": data.get("passes") or [], "exports": data.get("exports") or [],
                                       "runtime": data.get("runtime_options") or {}}, name, allow_no_export=True)
        if len(recipe.exports) > 1:
            raise ConfigError(f"variant '{name}' exports {len(recipe.exports)} artifacts; a variant has at most one",
                              hint="split it into one variant per export")
        return cls(name, recipe, data.get("runtime"))


@dataclasses.dataclass(frozen=True)
class Plan:
    name: str
    variants: tuple[Variant, ...]
    description: str = ""
    reference: str | None = None
    """The variant speed-ups are measured against (default: the plan's first variant)."""

    @classmethod
    def from_dict(cls, data: Any, name: str = "custom") -> "Plan":
        if not isinstance(data, dict) or not data.get("variants"):
            raise ConfigError(f"plan '{name}' must be a mapping with a non-empty 'variants' list")
        variants = tuple(Variant.from_dict(v) for v in data["variants"])
        names = [v.name for v in variants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"plan '{name}' has duplicate variant names: {', '.join(dupes)}")
        unknown = set(data) - {"name", "description", "variants", "reference"}
        if unknown:
            raise ConfigError(f"plan '{name}' has unknown key(s): {', '.join(sorted(unknown))}",
                              hint="keys: name, description, reference, variants")
        reference = data.get("reference")
        if reference is not None and reference not in names:
            raise ConfigError(f"plan '{name}' names reference '{reference}', which is not one of its variants",
                              hint=f"variants: {', '.join(names)}")
        return cls(data.get("name", name), variants, data.get("description", ""), reference)

    def to_dict(self) -> dict[str, Any]:
        data = {"name": self.name, "description": self.description, "variants": [v.to_dict() for v in self.variants]}
        if self.reference:
            data["reference"] = self.reference
        return data

    def select(self, names: list[str]) -> "Plan":
        """Only the named variants (``--variant``), in plan order."""
        known = [v.name for v in self.variants]
        for n in names:
            if n not in known:
                raise ConfigError(f"unknown variant '{n}' in plan '{self.name}'",
                                  hint=did_you_mean(n, known, "variants", n=2))
        kept = tuple(v for v in self.variants if v.name in names)
        return dataclasses.replace(self, variants=kept, reference=self.reference if self.reference in names else None)


def builtin_plan_names() -> list[str]:
    return builtin_names("builtin_plans")


def load_plan(name_or_path: str) -> Plan:
    """A built-in plan name, or a ``.yaml`` / ``.yml`` / ``.json`` file."""
    data, name = load_document(name_or_path, "builtin_plans", "plan")
    return Plan.from_dict(data, name)
