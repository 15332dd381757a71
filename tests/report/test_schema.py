"""report.json's schema: a variant's fields and types come from the dataclasses that write them."""

from __future__ import annotations

import dataclasses

import jsonschema
import pytest

from mobilize.bench.stats import BenchStats
from mobilize.report.results import VARIANT_JSON_SKIPS, VariantResult
from mobilize.core.outcome import Outcome
from mobilize.report.json_report import json_type, schema


def variant_schema() -> dict:
    return schema()["properties"]["variants"]["items"]


def test_every_field_a_variant_writes_is_in_the_schema_with_its_type():
    items = variant_schema()
    written = [f.name for f in dataclasses.fields(VariantResult) if f.name not in VARIANT_JSON_SKIPS]
    assert items["required"] == written
    assert set(f.name for f in dataclasses.fields(BenchStats)) <= set(items["properties"])
    assert items["properties"]["size_bytes"]["type"] == ["integer", "null"]
    assert items["properties"]["outcome"]["enum"] == [str(o) for o in Outcome]
    assert items["properties"]["kind"]["enum"][-1] is None  # the hand-written refinement kept on the generated type


def test_a_real_variant_validates_and_a_wrong_type_does_not():
    r = VariantResult("v", outcome=Outcome.OK, size_bytes=10)
    r.latency = BenchStats.from_times_ns([1_000_000, 2_000_000], 3_000_000).to_json()
    jsonschema.validate(r.to_json(), variant_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**r.to_json(), "size_bytes": "ten"}, variant_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in r.to_json().items() if k != "on_device_only"}, variant_schema())


def test_annotations_map_to_json_types():
    assert json_type(int | None) == {"type": ["integer", "null"]}
    assert json_type(list[float]) == {"type": "array", "items": {"type": "number"}}
    assert json_type(dict[str, object]) == {"type": "object"}
    assert json_type(Outcome)["enum"][0] == str(list(Outcome)[0])
