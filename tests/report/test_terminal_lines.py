"""Issue #48 item 11: the terminal's lines add up and agree with each other - the time line's phases sum to the
total, a speed-up that disagrees with the p50 column says why both are shown, and a busy machine's overruling of a
separation is said on the racing line too."""

from mobilize.compare.stages import StageSeconds
from mobilize.report.terminal import stage_line, summary_lines


def test_the_time_line_gives_phases_that_add_up_to_the_total():
    clock = StageSeconds()
    clock.worker("reference", "reference", {"start": 1.0, "reference": 3.0})
    clock.worker("export", "onnx-fp32", {"export": 9.0})  # beside the checks: the stages overlap
    clock.worker("check", "onnx-fp32", {"load": 2.0, "accuracy": 6.0})
    clock.worker("check", "eager-fp32", {"load": 1.0, "accuracy": 5.0})
    clock.walls = {"reference": 4.2, "variants": 10.4}
    clock.timed_rounds_s = 30.1
    clock.total_s = 45.0
    seconds = clock.to_json()
    assert seconds["wall"] == {"reference": 4.2, "variants": 10.4, "timed_rounds": 30.1, "rest": 0.3}
    assert sum(seconds["wall"].values()) == 45.0
    line = stage_line(seconds)
    assert line.startswith("time: reference 4 s; variants 10 s (exports 9 s beside the checks, slowest onnx-fp32 9 s; "
                           "load+accuracy 14 s, slowest onnx-fp32 8 s)"), line
    assert "; timed rounds 30 s; the rest 0 s (start-up, finishing, the report); 0 min 45 s in all (the phases " \
           "add up to it" in line


def test_a_speed_up_that_disagrees_with_p50_is_said_and_explained():
    report = {"reference_variant": "eager-fp32", "recommended": None, "variants": [
        {"name": "eager-fp32", "outcome": "OK", "latency_ms_p50": 10.0, "speedup": {"ratio": 1.0}},
        {"name": "onnx-fp32", "outcome": "OK", "latency_ms_p50": 17.2, "speedup": {"ratio": 0.87}},
        {"name": "onnx-int8", "outcome": "OK", "latency_ms_p50": 5.0, "speedup": {"ratio": 1.9}}]}
    from mobilize.report.terminal import speed_vs_p50_line

    line = speed_vs_p50_line(report)
    assert line.startswith("speed-up and p50 disagree for onnx-fp32 (p50 ratio 0.58x, speed-up 0.87x): "), line
    assert "onnx-int8" not in line and "round by round" in line and "pools all of a file's calls" in line


def test_a_busy_machine_overruling_a_separation_is_said_on_the_racing_line():
    racing = {"estimator": "median", "min_rounds": 3, "time_budget_s": 30, "rounds": 40, "elapsed_s": 12.0,
              "stopped": "separated", "leader": "onnx-int8", "contenders": ["onnx-int8"], "tied": [],
              "dropped": [{"name": "onnx-fp32", "after_round": 20, "rule": "race-separated", "reason": "slower",
                           "ratio": 1.5, "low": 1.2, "high": 1.8}], "correction": "alpha-spending", "looks": []}
    busy = {"rule": "race-busy-machine", "name": "onnx-int8", "reason": "fastest OK variant ... [rule race-busy-machine]"}
    report = {"variants": [{"name": "onnx-int8", "outcome": "OK", "latency_ms_p50": 1.0}], "recommended": busy,
              "racing": racing, "reference_variant": "onnx-int8"}
    line = next(ln for ln in summary_lines(report) if ln.startswith("racing:"))
    assert line.endswith("onnx-int8 separated from every other OK variant by the race's test, which the busy "
                         "machine overrules: not claimed [rule race-busy-machine]"), line
    report["recommended"] = {**busy, "rule": "race-separated"}
    line = next(ln for ln in summary_lines(report) if ln.startswith("racing:"))
    assert line.endswith("separated from every other OK variant"), line
