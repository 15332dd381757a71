"""The same work for every file (issue 41): a file whose interface converts (int8, NHWC) has its conversion timed
in the same-work unit and not in the file-alone figure; a float-interface file's two figures are one call."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from mobilize.compare.messages import Bench
from mobilize.compare.plan_run import file_alone
from mobilize.compare.timing import TimedUnit
from mobilize.runtimes.base import Interface, TensorInterface, Unit, float_interface, timed_call

SLOW_S = 0.004
"""The planted conversion's cost: far above a tiny model's run, far below a test's patience."""


class _FakeSession:
    """A Session-shaped stand-in: ``prepare`` is the conversion (slow when ``slow``), ``run_prepared`` is quick; each
    run records whether a conversion came right before it (``converted``: the timed loops' calls, in order)."""

    name = "fake"

    def __init__(self, converts: bool, slow: bool = False):
        self.converts, self.slow, self.pending, self.converted = converts, slow, False, []

    def interface(self) -> Interface:
        if self.converts:
            return Interface((TensorInterface("int8", "NHWC", "NCHW->NHWC transpose, quantize"),),
                             (TensorInterface("int8", "-", "dequantize"),))
        return float_interface(None)

    def prepare(self, inputs):
        if self.slow:
            time.sleep(SLOW_S)
        self.pending = True
        return [np.asarray(x) for x in inputs]

    def run_prepared(self, native):
        self.converted.append(self.pending)
        self.pending = False
        return native

    def run_float(self, inputs):
        return self.run_prepared(self.prepare(inputs))


def _median_ms(times_ns):
    return statistics.median(times_ns) / 1e6


def test_the_conversion_is_in_the_same_work_loop_and_not_in_the_file_alone_loop():
    """Which calls each loop times, not how long they took: every same-work run converts first, no file-alone run
    does (its one warm-up run and five timed ones come last in the round)."""
    session = _FakeSession(converts=True)
    unit = TimedUnit(session, [np.zeros((1, 3, 4, 4), np.float32)], "same-work")
    session.converted.clear()
    times = unit.round(Bench(6, warmup=1))
    assert len(times.times_ns) == 6 and times.file_times_ns is not None and len(times.file_times_ns) == 5
    same, alone = session.converted[:-6], session.converted[-6:]
    assert len(same) >= 7 and all(same) and not any(alone), session.converted


def test_the_file_alone_figure_is_the_median_of_its_own_loop():
    figures = file_alone([4_000_000, 4_100_000, 3_900_000], [1_000_000, 1_200_000, 900_000])
    assert figures["latency_ms_p50_file"] == 1.0 and not figures["latency_file_same_call"]


@pytest.mark.slow
def test_a_planted_slow_conversion_is_in_the_same_work_time_not_the_file_alone_time():
    """Timing behaviour (slow: it reads the clock): a 4 ms conversion shows in one figure only."""
    unit = TimedUnit(_FakeSession(converts=True, slow=True), [np.zeros((1, 3, 4, 4), np.float32)], "same-work")
    times = unit.round(Bench(6, warmup=1))
    assert _median_ms(times.times_ns) >= SLOW_S * 1e3
    assert _median_ms(times.file_times_ns) < SLOW_S * 1e3 / 2


def test_a_float_interface_file_has_one_call_for_both_figures():
    session = _FakeSession(converts=False)
    unit = TimedUnit(session, [np.zeros((1, 3, 4, 4), np.float32)], "same-work")
    assert unit.alone is None and unit.call[0] == session.run_prepared  # prepared once: the same call as bench's
    times = unit.round(Bench(4))
    assert times.file_times_ns is None
    figures = file_alone(times.times_ns, None)
    assert figures["latency_file_same_call"] and figures["latency_ms_p50_file"] == _median_ms(times.times_ns)
    assert session.interface().to_json()["conversion"] == "none"


def test_the_file_unit_times_the_file_alone_and_says_the_conversion_is_outside():
    session = _FakeSession(converts=True)
    fn, _ = timed_call(session, [np.zeros(3, np.float32)], Unit.FILE)
    assert fn == session.run_prepared and TimedUnit(session, [np.zeros(3, np.float32)], "file").alone is None
    assert session.interface().to_json("file")["conversion"] == "outside the timed call"
    assert session.interface().to_json()["conversion"] == "timed"


# -- a real LiteRT int8 file ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def int8_tflite(tmp_path_factory):
    pytest.importorskip("litert_torch")
    pytest.importorskip("ai_edge_litert")
    from mobilize.core.context import Context
    from mobilize.core.inputs import InputSpec
    from mobilize.pipeline.build import build
    from mobilize.pipeline.recipe import load_recipe
    from mobilize.sources.data import open_data
    from tests.conftest import INPUT_SHAPE, tiny_model

    ctx = Context(input_specs=[InputSpec(INPUT_SHAPE)], data=open_data("sample-photos"))
    recipe = load_recipe("litert-int8").with_option("calibration_samples", 4)
    return build(tiny_model(), recipe, ctx, tmp_path_factory.mktemp("int8") / "int8").artifacts[0].artifact


def test_a_litert_int8_file_states_its_interface_and_answers_the_same_in_both_units(int8_tflite):
    import torch

    from mobilize.runtimes.base import open_session
    from tests.conftest import tiny_input

    with open_session(int8_tflite, threads=1) as session:
        face = session.interface().to_json()
        assert face["inputs"][0]["dtype"] == "int8" and "quantize" in face["inputs"][0]["conversion"]
        assert face["outputs"][0]["dtype"] == "int8" and "dequantize" in face["outputs"][0]["conversion"]
        assert face["conversion"] == "timed"
        x = [tiny_input().numpy()]
        same = session.run_float(x)
        assert same[0].dtype == np.float32  # a float answer, without torch
        assert torch.equal(session.outputs_to_torch(same)[0], session.run(x)[0])


def _count_quantizes(monkeypatch) -> list[int]:
    """Count LiteRT's conversion from float (quantize, transpose) as it runs: ``[calls]``."""
    from mobilize.backends.litert import runtime as litert

    quantize, calls = litert.LiteRTSession.prepare, [0]

    def counted(self, inputs):
        calls[0] += 1
        return quantize(self, inputs)

    monkeypatch.setattr(litert.LiteRTSession, "prepare", counted)
    return calls


def test_a_litert_int8_files_quantize_runs_in_the_same_work_loop_only(int8_tflite, monkeypatch):
    from mobilize.runtimes.base import open_session
    from tests.conftest import tiny_input

    calls = _count_quantizes(monkeypatch)
    with open_session(int8_tflite, threads=1) as session:
        unit = TimedUnit(session, [tiny_input().numpy()], "same-work")
        before = calls[0]
        times = unit.round(Bench(10, warmup=1))
        in_same_work = calls[0] - before
        assert len(times.file_times_ns) == 5
        alone_before = calls[0]
        unit.alone[0](unit.alone[1])  # the file-alone call: the prepared input, no conversion
    assert in_same_work >= 11 and calls[0] == alone_before  # the 10 timed runs and the warm-up's, each quantizing


# -- the pick's scope: the unit and the CPU ----------------------------------------------------------------------
def _two_results():
    from mobilize.core.outcome import Outcome
    from mobilize.report.results import VariantResult

    out = []
    for name, scale in (("fast", 1.0), ("slow", 2.0)):
        r = VariantResult(name, outcome=Outcome.OK)
        r.latency_ms_round_medians = [scale * x for x in (1.0, 1.02, 0.99, 1.01, 1.0)]
        r.latency = {"latency_ms_p50": scale}
        out.append(r)
    return out


@pytest.mark.parametrize("unit,words", [("same-work", "timed on the same work for every file"),
                                        ("file", "timed on each file alone")])
def test_the_why_line_names_the_unit_and_the_cpu_with_the_isa_that_decided_the_kernels(unit, words):
    from mobilize.compare.recommend import recommend
    from mobilize.core.target import CpuInfo
    from mobilize.report.terminal import summary_lines

    zen4 = CpuInfo("AMD EPYC 9R14 96-Core Processor", "x86_64", 2,
                   ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "fma"))
    rec = recommend(_two_results(), None, cpu=zen4, unit=unit)
    assert rec["name"] == "fast" and rec["unit"] == unit and rec["scope"]["isa"] == ["AVX2", "AVX-512", "VNNI", "bf16"]
    report = {"recommended": rec, "reference_variant": "slow", "rounds": 5, "threads": 1, "unit": unit,
              "variants": [{"name": r.name, "outcome": "OK", **r.to_json()} for r in _two_results()]}
    why = next(line for line in summary_lines(report) if line.startswith("  why: "))
    assert words in why and "this ranking holds for this CPU: AMD EPYC 9R14 96-Core Processor" in why
    assert "(x86_64; AVX2, AVX-512, VNNI, bf16)" in why


def test_an_avx2_only_cpu_and_an_arm64_core_name_their_own_isa():
    from mobilize.compare.recommend import pick_scope
    from mobilize.core.target import CpuInfo

    assert pick_scope(CpuInfo("AMD EPYC 7R13", "x86_64", 2, ("avx2", "fma")))["isa"] == ["AVX2"]
    assert pick_scope(CpuInfo("Cortex-A76", "aarch64", 4, ("asimd", "asimddp")))["isa"] == ["NEON", "dotprod"]
    amx = pick_scope(CpuInfo("Xeon", "x86_64", 8, ("avx2", "avx512f", "amx_tile", "amx_int8", "amx_bf16")))
    assert amx["isa"] == ["AVX2", "AVX-512", "VNNI", "bf16", "AMX"]


def test_the_bare_loop_of_p1_and_pick_stability_times_the_unit_compare_picked_on(int8_tflite, monkeypatch):
    """benchmarks/p1.py's ``time_files`` (which pick_stability.py re-measures with, on the report's unit): the same
    work converts in every timed run, the file-alone loop in none (counted, not timed)."""
    import sys
    from pathlib import Path

    from tests.conftest import tiny_input

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    time_files = __import__("p1").time_files
    calls = _count_quantizes(monkeypatch)
    files = {"int8": Path(int8_tflite.path)}
    xs, ys = [[tiny_input()]], [0]
    time_files(files, xs, ys, threads=1, rounds=2, iterations=5, unit="same-work")
    same, calls[0] = calls[0], 0
    time_files(files, xs, ys, threads=1, rounds=2, iterations=5, unit="file")
    assert same >= 2 * 5 + 2 and calls[0] <= 2, (same, calls[0])  # a file: prepared once, and the top-1 run
    sys.modules.pop("p1", None)


@pytest.mark.parametrize("fmt", ["torchscript", "lite", "exported_program", "executorch", "onnx", "tflite"])
def test_every_runtime_answers_the_same_work_as_it_answers_run(artifacts, fmt):
    """Each format's default runtime (from the registry): its interface is stated, and ``run_float`` on the
    reference's float input gives what ``run`` gives (the same work, whichever unit is timed)."""
    import torch

    from mobilize.core.artifact import Artifact
    from mobilize.runtimes.base import as_array, open_session
    from tests.conftest import tiny_input

    with open_session(Artifact.from_file(artifacts[fmt]), threads=1) as session:
        face = session.interface().to_json()
        # a TorchScript file declares no inputs: it takes the reference's tensors as given
        assert face["conversion"] in ("none", "timed") and all(t["dtype"] == "float" for t in face["inputs"])
        x = [tiny_input()] if type(session).needs_torch else [as_array(tiny_input())]
        fn, arg = timed_call(session, x)
        got = session.outputs_to_torch(fn(arg) if fn == session.run_float else session.run_float(x))
        assert torch.allclose(got[0], session.run(x)[0], atol=1e-5)
