"""Time-weighted profiles: ETDump for ExecuTorch, the ONNX Runtime profiler for ONNX, and the WARNING when a
few ops outside the delegate take most of the time although the op count says the delegate runs nearly all;
then "why is int8 not faster" for an fp32 .pte and its int8 twin, compared op by op."""

from __future__ import annotations

import collections
import json
import statistics
import time

import pytest
import torch

from mobilize.backends.executorch.delegation import delegation_report
from mobilize.profile import FEW_OPS_PERCENT, profile_file
from mobilize.profile.core import OpTime, TimeProfile
from profile_models import export_pte, pool_net, sample


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """This 2-core machine is shared: export and calibrate on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def pool_ptes(tmp_path_factory):
    """(slow, fast): the pool left to the portable kernel, and the same network with a pool XNNPACK takes."""
    out = tmp_path_factory.mktemp("pool")
    return export_pte(pool_net(True), out / "slow").path, export_pte(pool_net(False), out / "fast").path


def _wall_ms(path, x, runs=15) -> float:
    from mobilize.core.artifact import Artifact
    from mobilize.runtimes.base import open_session

    with open_session(Artifact.from_file(path), threads=1) as s:
        native = s.prepare([x])
        for _ in range(3):
            s.run_prepared(native)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            s.run_prepared(native)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def test_one_slow_fallback_is_warned_though_the_op_count_looks_fine(pool_ptes):
    slow, fast = pool_ptes
    counted = delegation_report(slow)
    assert counted.portable_by_op == {"aten.avg_pool2d": 1} and counted.delegated_percent > 75
    assert counted.warning() is None  # the op count alone sees nothing wrong

    p = profile_file(slow, [sample()], threads=1, runs=10)
    assert p.available and p.source == "ETDump" and p.delegate == "XNNPACK" and p.runs == 10
    assert [o.op for o in p.ops if not o.inside] == ["aten.avg_pool2d"]
    assert sum(o.inside for o in p.ops) == counted.delegate_calls
    assert p.outside_percent > FEW_OPS_PERCENT
    assert p.inside_us + p.outside_us <= p.total_us * 1.05 and p.overhead_us >= 0
    assert (p.ops_in_delegate, p.ops_total) == (counted.delegated_ops, counted.total_ops)
    warning = p.warning()
    assert warning.startswith("WARNING: 1 op outside XNNPACK takes ") and "aten.avg_pool2d" in warning, warning
    assert f"runs {counted.delegated_ops} of {counted.total_ops}" in warning
    text = "\n".join(p.lines())
    assert "aten.avg_pool2d" in text and "XNNPACK delegate call" in text and text.endswith(warning)

    # control: the same network with a pool XNNPACK takes is fully delegated and not warned
    q = profile_file(fast, [sample()], threads=1, runs=10)
    assert q.available and all(o.inside for o in q.ops) and q.outside_percent == 0
    assert q.warning() is None
    assert TimeProfile.from_json(json.loads(json.dumps(p.to_json()))).warning() == warning


@pytest.mark.slow
def test_the_traces_time_is_the_programs_real_time(pool_ptes):
    """Timing behaviour (slow: wall-clock ratios hold on a quiet machine only): the trace's run time agrees with a
    plain run timed outside ExecuTorch, and the fully delegated control is faster."""
    slow, fast = pool_ptes
    p = profile_file(slow, [sample()], threads=1, runs=10)
    wall = _wall_ms(slow, sample())
    assert 0.3 * wall < p.total_us / 1e3 < 2.0 * wall, (p.total_us, wall)
    assert profile_file(fast, [sample()], threads=1, runs=10).total_us < p.total_us


def test_onnx_runtime_profile_names_ops_and_providers(tmp_path):
    path = tmp_path / "pool.onnx"
    torch.onnx.export(pool_net(True), (sample(),), str(path), dynamo=False, input_names=["input"])
    p = profile_file(path, [sample()], threads=1, runs=5)
    assert p.available and p.source == "ONNX Runtime profiler" and p.runs == 5
    assert p.delegate is None and p.outside_percent is None and p.warning() is None  # CPU provider only
    kinds = {op for op, *_ in p.by_op()}
    assert {"AveragePool", "Gemm"} <= kinds and ({"Conv", "FusedConv"} & kinds), kinds
    assert {o.where for o in p.ops} == {"CPUExecutionProvider"}
    assert 0 < sum(o.time_us for o in p.ops) <= p.total_us


def test_onnx_nodes_left_on_the_cpu_beside_an_accelerated_provider_are_fallbacks():
    """The trace parser on a hand-written trace (this host has no accelerated provider to produce a real one)."""
    from mobilize.backends.onnxruntime.profiler import profile_from_trace

    def node(name, op, provider, ts, dur):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur,
                "args": {"op_name": op, "provider": provider}}

    events = []
    for run, start in enumerate((0, 1000, 2000)):
        events.append({"cat": "Session", "name": "model_run", "ts": start, "dur": 500})
        events += [node("conv", "Conv", "XnnpackExecutionProvider", start + 10, 50),
                   node("topk", "TopK", "CPUExecutionProvider", start + 70, 400 if run else 10)]
    p = profile_from_trace(events, "m.onnx", 1, warmup=1, delegate="XnnpackExecutionProvider")
    assert p.runs == 2 and p.total_us == 500
    assert p.outside_percent == 80.0 and [o.op for o in p.top_fallbacks()] == ["TopK"]
    assert p.warning().startswith("WARNING: 1 op outside XnnpackExecutionProvider takes 80% of the measured time")


def test_etdump_that_records_nothing_is_reported_not_faked(pool_ptes, monkeypatch):
    """A wheel built without EXECUTORCH_ENABLE_EVENT_TRACER writes no ETDump: the profile says so, with no numbers."""
    import mobilize.backends.executorch.runtime as rt
    from mobilize.backends.executorch.profiler import NO_EVENTS

    class Module:
        def has_etdump(self):
            return True

        def forward(self, inputs):
            return []

        def write_etdump_result_to_file(self, path, debug_buffer_path=None):
            pass  # what the pybindings do when the tracer is compiled out: log, write nothing

    class Lib:
        @staticmethod
        def _threadpool_get_thread_count():
            return 1

        @staticmethod
        def _load_for_executorch(path, enable_etdump=False):
            return Module()

    monkeypatch.setattr(rt, "portable_lib", lambda: Lib)
    p = profile_file(pool_ptes[0], [sample()], threads=1, runs=2)
    assert not p.available and p.reason == NO_EVENTS and not p.ops and p.total_us == 0
    assert p.warning() is None and p.outside_percent is None
    assert p.lines()[0] == f"time profile unavailable (executorch): {NO_EVENTS}"


def test_warning_thresholds():
    def profile(outside_us: list[float], inside_us: float) -> TimeProfile:
        ops = [OpTime("XNNPACK delegate call", "instruction 0", "XNNPACK", True, inside_us)]
        ops += [OpTime(f"aten.op{i}", f"instruction {i + 1}", "portable", False, t) for i, t in enumerate(outside_us)]
        return TimeProfile("m.pte", "executorch", "ETDump", "XNNPACK", 1, 5, inside_us + sum(outside_us), ops)

    assert profile([10, 10], 80).warning() is None  # 20% outside
    few = profile([20, 15, 1], 64).warning()  # two ops pass 30% together: both named, the third not
    assert few.startswith("WARNING: 2 ops outside XNNPACK take 35% ") and "aten.op2" not in few
    spread = profile([6] * 10, 40).warning()  # no 3 ops reach 30%, but 60% is outside
    assert spread.startswith("WARNING: 60% of the measured time is spent outside XNNPACK, in 10 op(s)")


def test_bench_profile_flag(pool_ptes, run_cli, tmp_path):
    out = tmp_path / "b.json"
    code, stdout, _ = run_cli("bench", pool_ptes[0], "--threads", "1", "--iter", "5", "--warmup", "1", "--profile",
                              "--json", out)
    assert code == 0, stdout
    assert "Microseconds per iter" in stdout and "time profile of" in stdout
    assert "WARNING: 1 op outside XNNPACK" in stdout
    saved = json.loads(out.read_text())["time_profile"]
    assert saved["delegate"] == "XNNPACK" and saved["warning"].startswith("WARNING") and saved["threads"] == 1


def test_bench_profile_refuses_what_it_cannot_profile(run_cli):
    code, _, err = run_cli("bench", "zoo:conv_bn_relu", "--profile", "--iter", "1")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err  # a user error: one line, exit 2
    assert lines[0].startswith("mobilize: error: --profile needs an artifact file, not 'zoo:conv_bn_relu'")


# -- why is int8 not faster, ExecuTorch ------------------------------------------------------------
def test_int8_pte_pair_names_conversions_and_cpu(pool_ptes, tmp_path):
    """The pool stays float (portable) in int8 too: XNNPACK converts int8<->float around it, inside the delegate."""
    from mobilize.lowering.graph import op_name
    from mobilize.backends.executorch.pte import program_bytes, read_program
    from mobilize.backends.executorch.why_slow import PTE_QDQ, is_pte_conversion
    from mobilize.tune.why import why_not_faster

    fp32 = pool_ptes[0]
    int8 = export_pte(pool_net(True), tmp_path / "int8", quantize="int8", calibration_samples=4).path
    d = why_not_faster(fp32, int8, [sample()], runs=5)
    assert d.runtime == "executorch" and d.reason is None and d.runs == 5
    assert d.fp32_profile.delegate == d.int8_profile.delegate == "XNNPACK"
    # quantize/dequantize kernels outside the delegate: as many as the int8 program itself lists
    kernels = collections.Counter()
    for op, n in read_program(program_bytes(int8)).kernel_calls.items():
        kernels[op_name(op)] += n
    outside = [e for e in d.unfused_examples if not e.startswith("XNNPACK ")]
    assert len(outside) == sum(n for op, n in kernels.items() if op in PTE_QDQ)
    # ... and XNNPACK's own float<->int8 Convert operators, which fp32 does not have
    inside = [e for e in d.unfused_examples if e.startswith("XNNPACK Convert")]
    assert inside and d.unfused_qdq == len(outside) + len(inside)
    assert not any(o.op.startswith("Convert") for o in d.fp32_profile.delegate_ops)
    # int8 pays for them and fp32 has none - where the profiler's microsecond clock sees them: on a fast CPU
    # (AMD Zen 5) XNNPACK's Convert reads 0.0 us (or a fraction of the clock's 1 us step), and a cost below the
    # clock's resolution cannot be shown slower
    seen = any(is_pte_conversion(op) and us - d.fp32_us.get(op, 0.0) >= 1.0 for op, us in d.int8_us.items())
    shown = any(is_pte_conversion(op) for op, _, _ in d.slower_ops)
    assert shown or not seen, (d.int8_us, d.slower_ops)
    assert not d.fell_out  # avg_pool2d is outside the delegate in both: it did not fall out in int8
    text = "\n".join(d.lines())
    assert "ExecuTorch ETDump" in text and "CPU:" in text and "unfused quantize/dequantize" in text
    data = d.to_json()
    assert data["runtime"] == "executorch" and data["int8_profile"]["delegate"] == "XNNPACK"


def _profile(path: str, outside: list[tuple[str, float]]) -> TimeProfile:
    ops = [OpTime("XNNPACK delegate call", "instruction 0", "XNNPACK", True, 100.0)]
    ops += [OpTime(op, f"instruction {i + 1}", "portable", False, us) for i, (op, us) in enumerate(outside)]
    return TimeProfile(path, "executorch", "ETDump", "XNNPACK", 1, 5, 100.0 + sum(t for _, t in outside) + 5, ops)


def test_ops_that_fell_out_and_layout_conversions_are_named():
    from mobilize.backends.executorch.why_slow import diagnose_pte

    fp = _profile("fp32.pte", [("aten.avg_pool2d", 50.0)])
    q = _profile("int8.pte", [("quantized_decomposed.quantize_per_tensor", 5.0), ("aten.avg_pool2d", 50.0),
                              ("quantized_decomposed.dequantize_per_tensor", 4.0), ("aten.sigmoid", 30.0),
                              ("dim_order_ops._to_dim_order_copy", 8.0)])
    d = diagnose_pte(fp, q)
    assert d.fell_out == {"aten.sigmoid": 1}
    assert d.layout_ops == {"dim_order_ops._to_dim_order_copy": (0, 1)}
    assert d.unfused_qdq == 2
    assert [op for op, _, _ in d.slower_ops][0] == "aten.sigmoid"
    assert "fell out of the delegate in int8 (run outside it, not in fp32): aten.sigmoid x1" in "\n".join(d.lines())


def test_no_etdump_gives_a_reason_not_a_diagnosis():
    from mobilize.profile.core import unavailable
    from mobilize.backends.executorch.why_slow import diagnose_pte

    gone = unavailable("int8.pte", "executorch", "ETDump", 1, "ETDump recorded no events")
    d = diagnose_pte(_profile("fp32.pte", []), gone)
    assert d.reason == "int8.pte: ETDump recorded no events" and not d.slower_ops
    assert d.lines()[0] == "why is int8 not faster: no per-op answer: int8.pte: ETDump recorded no events"


def test_optimize_weighs_the_ops_by_time_and_warns_of_one_slow_fallback(run_cli, tmp_path):
    """optimize prints the op count (XNNPACK runs most ops) and, from a cheap ETDump profile, the WARNING that
    the one portable avg_pool2d takes most of the time."""
    code, out, err = run_cli("optimize", "tests/profile/profile_models.py:PoolNet", "--recipe", "executorch-fp32",
                             "--input_dims", "1,3,32,32", "-o", tmp_path / "o", "--json", tmp_path / "o.json")
    assert code == 0, err
    assert "WARNING: 1 op outside XNNPACK takes " in out and "aten.avg_pool2d" in out, out
    (art,) = json.loads((tmp_path / "o.json").read_text())["artifacts"]
    assert art["time_profile"]["source"] == "ETDump" and art["time_profile"]["runs"] == 3


@pytest.mark.slow
def test_optimize_says_an_op_count_alone_does_not_show_time_where_it_cannot_profile(run_cli, tmp_path):
    code, out, err = run_cli("optimize", "tests/profile/profile_models.py:PoolNet", "--recipe", "litert-fp32",
                             "--input_dims", "1,3,32,32", "-o", tmp_path / "t")
    assert code == 0, err
    assert "XNNPACK runs" in out and "an op count alone does not show where the time goes" in out, out
