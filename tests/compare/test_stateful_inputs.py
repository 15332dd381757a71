"""Issue #40 items 10 and 8: inputs as the model declares them (a batch of two stays two, a rank-0 ONNX input and a
TorchScript ``int`` argument take ``--input sr=16000``, a TorchScript file is a compare reference, an .npz sample that
does not fit names the dimension) and stateful models judged over a stream with their state carried."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from tests.conftest import NO_RACE, assert_one_line_error
from tests.user_models import CHUNK, HIDDEN, write_vad_npz, write_vad_onnx, write_vad_torchscript

FAST = ("--iter", "2", "--rounds", "1", "--accuracy-samples", "4", "--threads", "1", "--timeout", "120", *NO_RACE)
VAD_DIMS = ("--input_dims", f"1,{CHUNK};2,1,{HIDDEN}")


@pytest.fixture(scope="module")
def vad(tmp_path_factory) -> dict[str, Path]:
    """The voice-activity detector as a TorchScript file, a static-shape ONNX file (sr a 0-d int64 input), the
    same ONNX file with a planted drift in what the carried state contributes, and a speech-like stream (.npz)."""
    out = tmp_path_factory.mktemp("vad")
    files = {"pt": out / "vad.pt", "onnx": out / "vad.onnx", "drift": out / "drift.onnx", "npz": out / "vad.npz"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based ONNX exporter's deprecation
        write_vad_torchscript(files["pt"])
        write_vad_onnx(files["onnx"])
        write_vad_onnx(files["drift"], state_gain=0.95)
    write_vad_npz(files["npz"])
    return files


def report(out: Path) -> tuple[dict, dict[str, dict]]:
    data = json.loads((out / "report.json").read_text())
    return data, {v["name"]: v for v in data["variants"]}


def test_an_onnx_vad_with_sr_bound_is_judged_on_its_stream(run_cli, tmp_path, vad):
    code, out, err = run_cli("compare", vad["onnx"], "--input", "sr=16000", "--data", vad["npz"],
                             "--variant", "ort-opt-disable", "--variant", "onnx-dynamic", *FAST, "-o", tmp_path / "c")
    assert code == 0, err
    _, got = report(tmp_path / "c")
    for name in ("ort-opt-disable", "onnx-dynamic"):
        v = got[name]
        assert v["outcome"] == "OK" and v["verdict"]["rule"] == "budget-stream", v["verdict"]
        assert v["accuracy"]["stream"] == {"calls": 32, "state": "input 'state' <- output 1"}
        assert v["verdict"]["numbers"]["stream_calls"] == 32
        assert "streamed from a zero state" in v["verdict"]["reason"]
        assert any("single calls do not decide its verdict" in n for n in v["notes"])
    assert got["onnx-dynamic"]["kind"] == "quantized"
    assert 0 < got["onnx-dynamic"]["accuracy"]["first_output"]["max_abs"], "int8 differs from the float file"
    assert "budget-stream" in out
    header = out.splitlines()[[i for i, line in enumerate(out.splitlines()) if line.startswith("variant")][0]]
    assert "err %" in header and "cosine" not in header  # a one value's cosine is only its sign
    assert "<th>err %</th>" in (tmp_path / "c" / "report.html").read_text()


def test_a_drift_that_only_the_carried_state_shows_fails_the_stream(vad):
    """The planted file computes exactly what the model does from a zero state (its drift is in what the carried
    state contributes): judged on single calls it passes; streamed, its decisions flip and it is over budget."""
    import numpy as np
    import torch

    from mobilize.accuracy.metrics import compare_outputs, mark_stream
    from mobilize.accuracy.stream import run_stream, state_pairs
    from mobilize.accuracy.verify import assess
    from mobilize.runtimes.base import open_session
    from mobilize.sources.models import resolve_model

    data = np.load(vad["npz"])
    calls = [[torch.from_numpy(data["x"][i]), torch.from_numpy(data["state"][i])] for i in range(len(data["x"]))]
    reference = open_session(resolve_model(str(vad["onnx"]), bound_args={"sr": 16000}), threads=1)
    drifted = open_session(resolve_model(str(vad["drift"]), bound_args={"sr": 16000}), threads=1)
    ref_single, drift_single = [reference.run(c) for c in calls], [drifted.run(c) for c in calls]
    single = assess(compare_outputs(drift_single, ref_single), "quantized").verdict  # judged as an int8 file is
    assert single.outcome == "OK" and "(rule budget-one-value)" in single.reason, single.reason

    pairs = state_pairs(reference.declared_input_specs(), ref_single[0])
    assert pairs == [(1, 1)]
    streamed = compare_outputs(run_stream(drifted.run, calls, pairs), run_stream(reference.run, calls, pairs))
    mark_stream(streamed, len(calls), "state")
    verdict = assess(streamed, "quantized").verdict
    assert verdict.outcome == "OVER_BUDGET" and verdict.rule == "budget-stream-decisions", verdict.reason
    assert verdict.numbers["decision_flips"] >= 1 and "calls flipped" in verdict.reason


def test_a_torchscript_file_is_the_reference_with_its_int_argument_bound(run_cli, tmp_path, vad):
    code, out, err = run_cli("compare", vad["pt"], *VAD_DIMS, "--input", "sr=16000", "--data", vad["npz"], *FAST,
                             "-o", tmp_path / "c")
    assert code == 0, err
    data, got = report(tmp_path / "c")
    assert data["plan"] == "torchscript-file" and data["reference_variant"] == "torchscript"
    assert {n: v["outcome"] for n, v in got.items()} == {"torchscript": "OK", "torchscript-frozen": "OK", "lite": "OK"}
    assert all(v["verdict"]["rule"] == "budget-stream" for v in got.values())
    assert got["torchscript"]["accuracy"]["sqnr_exact"], "the file against itself"
    lite = got["lite"]  # built from the .pt: the lite interpreter takes no argument by name, so sr is bound inside
    assert lite["format"] == "lite" and lite["artifact"].endswith(".ptl") and lite["accuracy"]["sqnr_exact"]
    assert any("sr=16000 bound inside the file" in n for n in lite["notes"]), lite["notes"]
    assert any("the onnx exporter builds from a PyTorch model, not from a torchscript file" in n for n in data["notes"])
    assert data["bound_args"] == {"sr": 16000}


def test_a_lite_file_refuses_input_by_name(run_cli, tmp_path, vad):
    """A .ptl's forward takes its inputs by position only: --input is refused in one line that says so and points to
    the .pt it came from, whose lite variant binds the value inside."""
    import torch

    torch.jit.load(str(vad["pt"]))._save_for_lite_interpreter(str(tmp_path / "vad.ptl"))
    code, _, err = run_cli("compare", tmp_path / "vad.ptl", *VAD_DIMS, "--input", "sr=16000", *FAST,
                           "-o", tmp_path / "c")
    assert_one_line_error(code, err, "vad.ptl is a lite-interpreter file, whose forward takes its inputs by position "
                                     "only", "--input sr=...: its lite variant has the value bound inside the .ptl")


@pytest.mark.parametrize("kind", ["onnx", "pt"])
def test_a_scalar_input_left_without_a_value_is_refused(run_cli, tmp_path, vad, kind):
    dims = VAD_DIMS if kind == "pt" else ()
    code, _, err = run_cli("compare", vad[kind], *dims, *FAST, "-o", tmp_path / "c")
    assert_one_line_error(code, err, "which no --input gave a value", "--input sr=")


def test_bound_inputs_are_checked_against_the_file(vad):
    from mobilize.core.errors import ConfigError
    from mobilize.sources.models import resolve_model

    with pytest.raises(ConfigError, match="has no input 'rate'"):
        resolve_model(str(vad["onnx"]), bound_args={"rate": 16000})
    with pytest.raises(ConfigError, match="input 'state' of .* has shape \\(2,1,16\\)"):
        resolve_model(str(vad["onnx"]), bound_args={"state": 1})
    with pytest.raises(ConfigError, match="'x' is a tensor input"):
        resolve_model(str(vad["pt"]), bound_args={"x": 1})
    with pytest.raises(ConfigError, match="is an int; 1.5 is not a whole number"):
        resolve_model(str(vad["pt"]), bound_args={"sr": 1.5})
    bound = resolve_model(str(vad["onnx"]), bound_args={"sr": 16000.0})
    assert bound.bound_args == {"sr": 16000} and any("sr=16000" in n for n in bound.notes)


def test_a_static_batch_of_two_compares_as_declared(run_cli, tmp_path):
    """An ONNX file whose input is (2, 8): fed as declared (never forced to a batch of one), judged row by row, and its
    times said to be per call of 2 rows."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 8),), str(tmp_path / "b2.onnx"), input_names=["x"], dynamo=False)
    code, out, err = run_cli("compare", tmp_path / "b2.onnx", "--variant", "ort-opt-disable", *FAST, "-o", tmp_path / "c")
    assert code == 0, err
    assert "every time is per call of the model's fixed batch of 2 rows (a row: the time / 2)" in out
    data, got = report(tmp_path / "c")
    v = got["ort-opt-disable"]
    assert v["outcome"] == "OK" and v["verdict"]["rule"] == "float-sqnr", v["verdict"]
    assert data["input_specs"][0]["shape"] == [2, 8] and data["call_rows"] == 2
    assert data["accuracy_samples"] == 8, "4 samples of a batch of 2, judged as 8 rows"
    assert any("batch of 2 was fed whole" in n for n in v["notes"])


def test_an_npz_sample_that_does_not_fit_names_the_dimension(tmp_path):
    import numpy as np

    from mobilize.core.errors import ConfigError
    from mobilize.core.inputs import InputSpec
    from mobilize.sources.data import open_data

    specs = [InputSpec((1, 4)), InputSpec((2, 1, 128))]
    np.savez(tmp_path / "ok.npz", x0=np.zeros((3, 4), np.float32), x1=np.ones((3, 2, 1, 128), np.float32))
    xs = open_data(str(tmp_path / "ok.npz")).sample_lists(specs, 3)
    assert [tuple(t.shape) for t in xs[0]] == [(1, 4), (2, 1, 128)], "a sample that is the whole input, as it is"
    np.savez(tmp_path / "bad.npz", x0=np.zeros((3, 4), np.float32), x1=np.ones((3, 2, 1, 64), np.float32))
    with pytest.raises(ConfigError) as info:
        open_data(str(tmp_path / "bad.npz")).sample_lists(specs, 3)
    assert "array 'x1' has samples of shape (2,1,64), but the model input is (2,1,128) float" in str(info.value)
    assert "dimension 2 is 64 where the input has 128" in str(info.value)
