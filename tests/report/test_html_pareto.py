"""The latency-vs-accuracy chart's Pareto front holds only points whose accuracy means something (#40 item 13)."""

from __future__ import annotations

from mobilize.report.html import accuracy_chart


def _variants(outcomes: dict[str, str]) -> list[dict]:
    return [{"name": n, "outcome": o, "latency_ms_p50": 1.0 + k, "latency_ms_round_medians": [1.0 + k],
             "verdict": {"outcome": o, "rule": "vacuous-reference" if o == "VACUOUS" else "within-budget"},
             "accuracy": {"top1": 80.0 + 5 * k, "samples": 50}} for k, (n, o) in enumerate(outcomes.items())]


def test_an_all_vacuous_chart_marks_no_front():
    svg = accuracy_chart(_variants({"fp32": "VACUOUS", "int8": "VACUOUS", "fp16": "VACUOUS"}), "top1")
    assert "pareto-front" not in svg and "★" not in svg
    assert "No Pareto front" in svg and "vacuous-reference" in svg


def test_vacuous_points_stay_off_a_front():
    svg = accuracy_chart(_variants({"fp32": "OK", "int8": "VACUOUS", "fp16": "OK"}), "top1")
    assert 'class="pareto-front"' in svg and "fp32 ★" in svg and "fp16 ★" in svg and "int8 ★" not in svg
    assert "Not on it: int8 (VACUOUS" in svg
