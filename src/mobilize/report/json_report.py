"""report.json: the compare results with ``schema_version``; validated against ``schema.json``.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from mobilize.core.jsonfile import dumps_measured
from mobilize.core.artifact import atomic_write_text

SCHEMA_VERSION = 2


def schema() -> dict[str, Any]:
    """report.json's JSON schema.  A variant's fields and their types are generated from the dataclasses that
    write them (:class:`~mobilize.report.results.VariantResult`, whose ``to_json`` writes every field, and
    :class:`~mobilize.bench.stats.BenchStats`, merged in once timed); schema.json adds what a type annotation
    cannot say (the structure inside ``accuracy``, ``verdict``, ``speedup``, the keys a variant's details
    add, descriptions) and the report's top level, which compare assembles as a dict.  Every enum comes from
    the Python enum it names (``["$Outcome"]``).  So a field added to a result class is in the schema, typed."""
    from mobilize.accuracy.tasks import Task
    from mobilize.accuracy.verify import Kind
    from mobilize.core.outcome import Outcome

    enums = {"$Outcome": [str(o) for o in Outcome], "$Kind": [str(k) for k in Kind], "$Task": [str(t) for t in Task]}

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (_expand(v, enums) if k == "enum" else fill(v)) for k, v in node.items()}
        return [fill(v) for v in node] if isinstance(node, list) else node

    out = fill(json.loads((resources.files("mobilize") / "report" / "schema.json").read_text()))
    items = out["properties"]["variants"]["items"]
    generated, required = variant_fields()
    items["properties"] = {k: {**generated.get(k, {}), **items["properties"].get(k, {})}
                           for k in [*generated, *items["properties"]]}
    items["required"] = required
    return out


def variant_fields() -> tuple[dict[str, Any], list[str]]:
    """A variant's properties as its dataclasses declare them, and the ones ``VariantResult.to_json`` always
    writes (required)."""
    import dataclasses
    import typing

    from mobilize.bench.stats import BenchStats
    from mobilize.report.results import VARIANT_JSON_SKIPS, VariantResult

    props, required = {}, []
    hints = typing.get_type_hints(VariantResult)
    for f in dataclasses.fields(VariantResult):
        if f.name not in VARIANT_JSON_SKIPS:
            props[f.name] = json_type(hints[f.name])
            required.append(f.name)
    bench = typing.get_type_hints(BenchStats)
    props.update({f.name: json_type(bench[f.name]) for f in dataclasses.fields(BenchStats)})
    return props, required


def json_type(annotation: Any) -> dict[str, Any]:
    """The JSON schema of a field's type annotation (str, int, float, bool, enums, lists, dicts, ``X | None``)."""
    import dataclasses
    import enum
    import types
    import typing

    args = typing.get_args(annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        inner = [json_type(a) for a in args if a is not type(None)]
        if len(inner) != 1 or "type" not in inner[0]:
            return {}
        nullable = type(None) in args
        return {**inner[0], "type": [inner[0]["type"], "null"] if nullable else inner[0]["type"]}
    origin = typing.get_origin(annotation) or annotation
    if dataclasses.is_dataclass(origin):  # a typed block (a decoder's TokenFigures): its fields, each typed
        hints = typing.get_type_hints(origin)
        fields = dataclasses.fields(origin)
        return {"type": "object", "properties": {f.name: json_type(hints[f.name]) for f in fields},
                "required": [f.name for f in fields]}
    if isinstance(origin, type) and issubclass(origin, enum.Enum):
        return {"enum": [str(m) for m in origin]}
    simple = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object"}
    if origin in simple:
        return {"type": simple[origin]}
    if origin in (list, tuple):
        return {"type": "array", **({"items": json_type(args[0])} if args and args[0] is not Any else {})}
    return {}


def _expand(values: list, enums: dict[str, list]) -> list:
    return [x for v in values for x in (enums[v] if isinstance(v, str) and v in enums else [v])]


def validate(report: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError if the report does not match the schema."""
    import jsonschema

    jsonschema.validate(report, schema())


def write_reports(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    from mobilize.report.html import render_html

    report.setdefault("schema_version", SCHEMA_VERSION)
    json_path, html_path = out_dir / "report.json", out_dir / "report.html"
    atomic_write_text(json_path, dumps_measured(report, indent=2, default=str) + "\n")
    atomic_write_text(html_path, render_html(report))
    return json_path, html_path
