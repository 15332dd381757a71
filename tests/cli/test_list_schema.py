"""``mobilize list schema`` (#65 item 4): report.json's schema as any JSON Schema validator needs it - the packaged
schema.json holds placeholders (``"enum": ["$Task"]``) that only mobilize fills, so a user validating with it got a
wrong schema.  Checked with the ``jsonschema`` package alone on a real classifier report (the decoder report's
check is beside its run, tests/generation/test_generation_compare.py)."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest


def test_the_printed_schema_validates_a_real_report_and_refuses_a_broken_one(run_cli, tmp_path, misbehaving_report):
    code, out, _ = run_cli("list", "schema")
    assert code == 0 and "$Outcome" not in out and "$Task" not in out
    schema = json.loads(out)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(misbehaving_report)  # a real compare's report.json, odd variants and all
    broken = copy.deepcopy(misbehaving_report)
    broken["variants"][0]["outcome"] = "GREAT"
    with pytest.raises(jsonschema.ValidationError, match="GREAT"):
        validator.validate(broken)
    code, _, err = run_cli("list", "schema", "--json", tmp_path / "report.schema.json")
    assert code == 0 and json.loads((tmp_path / "report.schema.json").read_text()) == schema
    code, listing, _ = run_cli("list")
    assert "mobilize list schema" in listing
