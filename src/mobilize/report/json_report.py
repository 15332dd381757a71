"""report.json: the compare results with ``schema_version``; validated against ``schema.json``.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from mobilize.artifact import atomic_write_text

SCHEMA_VERSION = 2


def schema() -> dict[str, Any]:
    """report.json's JSON schema: its structure from schema.json, every enum from the Python enum it names
    (``["$Outcome"]``), so the two cannot drift apart."""
    from mobilize.accuracy.tasks import Task
    from mobilize.accuracy.verify import Kind
    from mobilize.outcome import Outcome

    enums = {"$Outcome": [str(o) for o in Outcome], "$Kind": [str(k) for k in Kind], "$Task": [str(t) for t in Task]}

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (_expand(v, enums) if k == "enum" else fill(v)) for k, v in node.items()}
        return [fill(v) for v in node] if isinstance(node, list) else node

    return fill(json.loads((resources.files("mobilize") / "report" / "schema.json").read_text()))


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
    atomic_write_text(json_path, json.dumps(report, indent=2, default=str) + "\n")
    atomic_write_text(html_path, render_html(report))
    return json_path, html_path
