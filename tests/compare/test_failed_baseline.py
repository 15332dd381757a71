"""A variant that failed in the timed rounds has no time and is never the speed-up baseline: the next timed
variant is, and its notes say so (seen: the shared timing host killed, eager-fp32 RUN_FAIL kept its 48 ms p50
and stayed the baseline of "3283x")."""

from types import SimpleNamespace

from mobilize.compare.plan_run import PlanRun
from mobilize.core.outcome import Outcome
from mobilize.report.results import VariantResult


def _timed(name: str, medians: list[float], outcome: Outcome = Outcome.OK) -> VariantResult:
    r = VariantResult(name, outcome=outcome)
    r.latency, r.latency_ms_round_medians = {"latency_ms_p50": medians[0]}, medians
    return r


def test_a_failed_reference_hands_the_baseline_to_the_next_timed_variant():
    eager = VariantResult("eager-fp32")
    eager.fail(Outcome.RUN_FAIL, "bench", "the shared timing host stopped answering")
    run = SimpleNamespace(results={"eager-fp32": eager, "onnx-fp32": _timed("onnx-fp32", [1.0, 1.02, 0.98]),
                                   "executorch-fp32": _timed("executorch-fp32", [2.0, 2.1, 1.9])},
                          reference_name="eager-fp32", race=None, machine_load=None, frames=None, reference=None,
                          cfg=SimpleNamespace(unit="same-work", budgets=None, data=None, baseline=None))  # the unit the pick is made
    # on; no budgets; no --data (the pick says it was judged on random inputs)
    PlanRun._finish(run)
    assert run.reference_name == "onnx-fp32"
    assert eager.speedup is None and not eager.latency_ms_round_medians
    assert run.results["executorch-fp32"].speedup["reference"] == "onnx-fp32"
    assert 0.4 < run.results["executorch-fp32"].speedup["ratio"] < 0.6
    assert any("speed-ups are against onnx-fp32" in n for n in eager.notes)
    assert run.recommended["name"] == "onnx-fp32"
    assert run.recommended["inputs"]["text"].startswith("judged on seeded random inputs (no --data)")
