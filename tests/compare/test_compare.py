"""`mobilize compare`: isolation of crashing, hanging, raising and wrong variants; the reports."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from mobilize.report.html import pareto_front
from mobilize.report.json_report import schema
from tests.conftest import assert_one_line_error


def test_each_failure_is_recorded_and_the_rest_completes(misbehaving_run, capsys):
    code, out = misbehaving_run
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    got = {v["name"]: (v["outcome"], v["stage"]) for v in report["variants"]}
    assert got == {  # the random-init ToyClassifier gives the same logits for every photo: agreeing proves nothing
        "eager-fp32": ("VACUOUS", None),
        "crash": ("RUN_FAIL", "run"),
        "hang": ("TIMEOUT", "passes"),
        "raise": ("EXPORT_FAIL", "export"),
        "wrong": ("MISMATCH", "accuracy"),
        "fused": ("VACUOUS", None),
    }
    assert "does not depend on the input" in report["reference_warning"]
    assert report["recommended"] is None  # nothing was shown to be accurate
    fused_verdict = next(v for v in report["variants"] if v["name"] == "fused")["verdict"]
    assert fused_verdict["rule"] == "vacuous-reference" and fused_verdict["quality"]["outcome"] == "OK"
    notes = {v["name"]: " ".join(v["notes"]) for v in report["variants"]}
    assert "killed by SIGABRT" in notes["crash"]
    assert "no answer within 20 s" in notes["hang"]
    assert "aten::frobnicate" in notes["raise"]
    assert not list(out.glob("artifacts/raise*")), "a failed export leaves no file"
    for name in ("eager-fp32", "fused", "wrong"):
        v = next(v for v in report["variants"] if v["name"] == name)
        assert v["latency_ms_p50"] > 0 and v["iterations"] == 6
    fused = next(v for v in report["variants"] if v["name"] == "fused")
    assert fused["accuracy"]["max_abs"] < 1e-3 and fused["speedup_vs_reference"] > 0


def test_json_validates_against_schema(misbehaving_run):
    _, out = misbehaving_run
    report = json.loads((out / "report.json").read_text())
    assert report["schema_version"] == 2 and report["complete"] is True
    jsonschema.validate(report, schema())
    broken = dict(report, variants=[dict(report["variants"][0], outcome="FINE")])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema())


def test_html_is_self_contained_with_charts(misbehaving_run):
    _, out = misbehaving_run
    page = (out / "report.html").read_text()
    for chart in ('id="latency-chart"', 'id="pareto-chart"', 'id="size-chart"'):
        assert chart in page
    # the reference is VACUOUS and the only other timed file is broken (MISMATCH): no front (#48 item 8)
    assert 'class="pareto-front"' not in page and "No Pareto front" in page and "wrong (MISMATCH)" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "no network references"
    assert "<script" not in page
    assert "TIMEOUT" in page and "killed by SIGABRT" in page
    assert "train or load weights; random init gives near-constant outputs" in page  # the degenerate reference
    assert ">fidelity</th>" in page


def test_pareto_front():
    pts = [("a", 1.0, 90.0), ("b", 2.0, 95.0), ("c", 3.0, 94.0), ("d", 0.5, 80.0), ("e", 2.5, 96.0)]
    assert pareto_front(pts) == ["d", "a", "b", "e"]
    floats = [("fast", 1.0, 0.9999999999996), ("slow", 2.0, 1.0)]  # two float variants: a tie, one star
    assert pareto_front(floats, resolution=1e-5) == ["fast"]


def test_the_cosine_axis_stays_within_its_range():
    from mobilize.report.html import accuracy_chart

    variants = [{"name": n, "latency_ms_p50": lat, "latency_ms_round_medians": [lat], "accuracy": {
        "cosine": c, "cosine_ci95": [c - 0.001, min(c + 0.001, 1.0)], "samples": 8}}
        for n, lat, c in (("a", 1.0, 0.9999999999996), ("b", 2.0, 1.0), ("c", 1.5, 0.999))]
    svg = accuracy_chart(variants, "cosine")
    top = float(re.findall(r'text-anchor="end">([-\d.e]+)</text>', svg)[1])
    assert top <= 1.0 and svg.count("★") == 2  # one star (a; b is a tie with it) and the legend's


@pytest.mark.parametrize("args,fragment", [
    (["--plan", "fastest"], "unknown plan 'fastest'"),
    (["--plan", "default", "--variant", "onnx-int9"], "unknown variant 'onnx-int9'"),
    (["--data", "nowhere/"], "data not found: nowhere/"),
])
def test_bad_arguments_fail_before_work(run_cli, tmp_path, args, fragment):
    code, _, err = run_cli("compare", "zoo:toy_classifier", *args, "-o", tmp_path / "out")
    assert_one_line_error(code, err, fragment)
    assert not (tmp_path / "out" / "report.json").exists()


def test_data_that_does_not_fit_the_model(run_cli, tmp_path):
    import numpy as np

    np.savez(tmp_path / "vectors.npz", x=np.zeros((4, 7), dtype=np.float32))
    code, _, err = run_cli("compare", "zoo:toy_classifier", "--data", tmp_path / "vectors.npz", "-o", tmp_path / "o2")
    assert_one_line_error(code, err, "samples of shape (7) do not match the model input (1,3,224,224) float: ")
    assert not (tmp_path / "o2" / "report.json").exists()


def test_output_folder_not_usable(run_cli, tmp_path):
    (tmp_path / "file").write_text("x")
    assert_one_line_error(*run_cli("compare", "--plan", "quick", "-o", tmp_path / "file")[::2], "is a file")


def test_a_failed_reference_keeps_the_folder_its_logs_and_a_report(run_cli, tmp_path):
    """The float reference runs out of time (a --timeout the user gave): exit 2, and the folder keeps logs/ and a
    report.json naming the failed stage and the --timeout to try."""
    out = tmp_path / "out"
    code, _, err = run_cli("compare", "--plan", "quick", "--timeout", "0.5", "-o", out)
    assert code == 2
    assert "the float reference failed: no answer within 0.5 s in stage" in err and "try --timeout 60" in err and "(failed stage: " in err
    report = json.loads((out / "report.json").read_text())
    failure = report["reference_failure"]
    assert failure["outcome"] == "TIMEOUT" and failure["stage"] and failure["timeout_s"] == 0.5
    assert "--timeout 60" in failure["hint"] and report["complete"] is False
    assert (out / "logs").is_dir()  # the worker may not have opened its log yet, but the folder stays
    assert "the float reference failed (TIMEOUT" in (out / "report.html").read_text()
    jsonschema.validate(report, schema())
