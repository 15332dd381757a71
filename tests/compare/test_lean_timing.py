"""compare's lean timing worker: a file whose runtime needs no torch is timed in a process without torch."""

from __future__ import annotations

import contextlib
import numpy as np
import pytest

from mobilize.compare.messages import Bench, Job, TimerReady, Times
from mobilize.compare.failures import StageFailure
from mobilize.compare.worker_handle import Worker
from mobilize.compare.timing import lean_runtime, write_inputs


def _tiny_onnx(path):
    """A real ONNX file (Relu of a 1x8 input), made with onnx's helpers: no torch in the parent either."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _job(tmp_path, kind: str, runtime: str = "onnxruntime") -> Job:
    return Job(kind=kind, model="", variant={"name": "tiny", "runtime": runtime}, input_specs=[], data=None,
               calibration=None, out_dir=str(tmp_path), threads=1, accuracy_samples=1, reference_path="",
               log_path=str(tmp_path / f"{kind}.log"), artifact=str(tmp_path / "tiny.onnx"),
               inputs_path=str(tmp_path / "inputs.npz"))


@pytest.mark.parametrize("kind,runtime,torch_loaded", [("time", "onnxruntime", False), ("time", "openvino", False),
                                                       ("time-torch", "onnxruntime", True)])
def test_the_lean_worker_times_an_onnx_file_without_torch(tmp_path, kind, runtime, torch_loaded):
    pytest.importorskip(runtime)
    _tiny_onnx(tmp_path / "tiny.onnx")
    write_inputs(str(tmp_path / "inputs.npz"), [np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)])
    worker = Worker(_job(tmp_path, kind, runtime))
    try:
        ready = worker.expect(TimerReady, 120)
        assert (ready.runtime, ready.torch_loaded) == (runtime, torch_loaded)
        worker.send(Bench(7, warmup=1))
        times = worker.expect(Times, 60)
        assert len(times.times_ns) == 7 and all(t > 0 for t in times.times_ns) and times.rss_mb > 0
        if not torch_loaded:  # its own peak, not its parent's (importing torch alone takes ~225 MB)
            assert times.rss_mb < 200, times.rss_mb
    finally:
        worker.stop()
    assert lean_runtime(runtime) and not lean_runtime("executorch")


def test_a_lean_worker_that_cannot_load_its_file_fails_in_its_load_stage(tmp_path):
    (tmp_path / "tiny.onnx").write_bytes(b"not an onnx file")
    write_inputs(str(tmp_path / "inputs.npz"), [np.zeros((1, 8), np.float32)])
    worker = Worker(_job(tmp_path, "time"))
    with pytest.raises(StageFailure) as failed:
        worker.expect(TimerReady, 120)
    worker.kill()
    assert failed.value.stage == "load" and "tiny.onnx" in failed.value.message


def test_the_report_says_where_the_time_went_and_which_worker_timed(misbehaving_report):
    seconds = misbehaving_report["stage_seconds"]
    assert seconds["reference"] > 0 and seconds["total"] >= seconds["reference"]
    assert {"eager-fp32", "fused", "wrong", "crash"} <= set(seconds["load_accuracy"])
    assert set(seconds["export"]) == {"raise"}  # the only variant with an export (it fails, and is still counted)
    assert seconds["timed_rounds"] > 0 and seconds["lint"] is not None
    workers = {v["name"]: v.get("timing_worker") for v in misbehaving_report["variants"]}
    assert workers["fused"] == workers["eager-fp32"] == "host"  # eager modules are timed in the shared torch host


# -- the shared timing host of the torch-timed variants ----------------------------------------------------
def _hosted_job(tmp_path, name: str, module, width: int) -> Job:
    """A variant for the host: an eager module in a timing bundle, as a checking worker writes it."""
    import torch

    from mobilize.compare.host import write_bundle
    from mobilize.core.inputs import InputSpec
    from mobilize.sources.models import ModelSource

    shape = (1, width) if isinstance(width, int) else width
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    write_inputs(str(tmp_path / f"{name}.npz"), [x])
    specs = [InputSpec(shape)]
    with torch.inference_mode():
        outputs = [module(torch.from_numpy(x))]
    assert write_bundle(str(tmp_path / f"{name}.pt"), ModelSource(module, name, specs), specs, outputs) == ""
    job = _job(tmp_path, "run", "eager")
    job.variant, job.artifact = {"name": name, "runtime": "eager"}, None
    job.inputs_path, job.timing_bundle = str(tmp_path / f"{name}.npz"), str(tmp_path / f"{name}.pt")
    return job


@contextlib.contextmanager
def _engine(name: str):
    import torch

    saved = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = saved


def _qnnpack_int8():
    """A tiny eager int8 module quantized for qnnpack: the host must re-pack its weights for qnnpack, not for
    the process's default engine, or its outputs differ from the checked ones (and the host refuses it)."""
    import torch
    from torch.ao import quantization as tq

    with _engine("qnnpack"):
        m = torch.nn.Sequential(tq.QuantStub(), torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), tq.DeQuantStub(),
                                torch.nn.Flatten()).eval()
        m.qconfig = tq.get_default_qconfig("qnnpack")
        tq.prepare(m, inplace=True)
        m(torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(0)))
        return tq.convert(m)


def _host(tmp_path):
    from mobilize.compare.host import TimingHost

    job = _job(tmp_path, "time-host")
    job.variant = {"name": "timing-host"}
    return TimingHost(Worker(job))


def test_a_shared_host_times_each_variant_by_name_and_its_crash_fails_them_all_naming_the_cause(tmp_path):
    """One host, four variants answered by name (that each gets its own times is timed in the slow test below); a
    qnnpack int8 module loads under its own engine (the host checks its outputs as it opens it); then one variant
    crashes the host mid-round, and every variant it hosted fails with the cause."""
    import torch

    from tests.compare_plugins import AbortAfterCalls

    torch.manual_seed(0)
    light = torch.nn.Linear(8, 8).eval()
    heavy = torch.nn.Sequential(torch.nn.Linear(8, 512), *[torch.nn.Linear(512, 512) for _ in range(12)]).eval()
    host = _host(tmp_path)
    try:
        with _engine("qnnpack"):  # as the checking worker is left by the quantize pass
            int8_job = _hosted_job(tmp_path, "int8", _qnnpack_int8(), (1, 3, 8, 8))  # its outputs as its checking worker saw them
        hosted = {name: host.open(name, job, 120)[0] for name, job in (
            ("light", _hosted_job(tmp_path, "light", light, 8)), ("heavy", _hosted_job(tmp_path, "heavy", heavy, 8)),
            ("int8", int8_job), ("crash", _hosted_job(tmp_path, "crash", AbortAfterCalls(calls=2), 8)))}
        for name, n in (("heavy", 15), ("light", 7), ("int8", 9), ("light", 5)):  # interleaved, one at a time, by name
            hosted[name].send(Bench(n, warmup=2))
            assert len(hosted[name].expect(Times, 60).times_ns) == n  # each answer is the round it was asked for
        assert hosted["light"].child is hosted["heavy"].child  # one process, counted once for memory
        failures = []
        for name in ("crash", "light", "heavy"):  # its load ran it twice; its first timed run kills the host
            hosted[name].send(Bench(3))
            with pytest.raises(StageFailure) as failed:
                hosted[name].expect(Times, 60)
            failures.append(failed.value)
    finally:
        host.stop()
    for failed in failures:
        assert failed.message.startswith("timing failed: the shared timing host (also timing light, heavy, int8) failed "
                                         "while timing crash: the process was killed by SIGABRT"), failed.message
        assert failed.outcome == "RUN_FAIL"


@pytest.mark.slow
def test_a_shared_host_gives_each_variant_its_own_times(tmp_path):
    """Timing behaviour (slow: a wall-clock ratio): distinct costs give distinct medians, interleaved by name."""
    import statistics

    import torch

    torch.manual_seed(0)
    light = torch.nn.Linear(8, 8).eval()
    heavy = torch.nn.Sequential(torch.nn.Linear(8, 512), *[torch.nn.Linear(512, 512) for _ in range(12)]).eval()
    host = _host(tmp_path)
    try:
        hosted = {name: host.open(name, _hosted_job(tmp_path, name, module, 8), 120)[0]
                  for name, module in (("light", light), ("heavy", heavy))}
        medians = {}
        for name in ("heavy", "light", "heavy", "light"):
            hosted[name].send(Bench(15, warmup=2))
            medians.setdefault(name, []).append(statistics.median(hosted[name].expect(Times, 60).times_ns))
    finally:
        host.stop()
    assert min(medians["heavy"]) > 5 * max(medians["light"]), medians  # ~3.2M MACs vs 64
