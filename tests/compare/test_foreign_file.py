"""`mobilize compare FILE.onnx`: a file made elsewhere is the float reference and its variants are what builds
from it (ONNX Runtime optimization levels, int8, .ort, OpenVINO), with the same verdicts and reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import NO_RACE, assert_one_line_error

FAST = ("--iter", "2", "--rounds", "1", "--accuracy-samples", "3", "--threads", "1", "--timeout", "120", *NO_RACE)


def onnx_test_model(name: str) -> Path:
    """A model that ships inside the onnx package's backend test data (converted from PyTorch, real weights)."""
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted" / name / "model.onnx"


@pytest.fixture(scope="module")
def mobilize_onnx(tmp_path_factory) -> Path:
    """An ONNX file written by mobilize's own exporter."""
    from mobilize.core.context import Context
    from mobilize.exporters import EXPORTERS
    from mobilize.core.inputs import InputSpec
    from tests.conftest import tiny_model

    out = tmp_path_factory.mktemp("foreign")
    return EXPORTERS.get("onnx")().export(tiny_model(), Context(input_specs=[InputSpec((1, 3, 32, 32))]),
                                          out / "tiny").path


def verdicts(out: Path) -> tuple[dict, dict[str, dict]]:
    report = json.loads((out / "report.json").read_text())
    return report, {v["name"]: v for v in report["variants"]}


def test_an_onnx_file_from_mobilize_is_the_reference(run_cli, tmp_path, mobilize_onnx):
    code, out, err = run_cli("compare", mobilize_onnx, "--variant", "ort-opt-disable", "--variant", "onnx-int8",
                             *FAST, "-o", tmp_path / "c")
    assert code == 0, err
    report, got = verdicts(tmp_path / "c")
    assert report["plan"] == "onnx-file" and list(got) == ["ort-opt-disable", "onnx-int8"]
    assert got["ort-opt-disable"]["outcome"] == "OK" and got["ort-opt-disable"]["verdict"]["rule"] == "float-sqnr"
    assert got["onnx-int8"]["outcome"] == "OK" and got["onnx-int8"]["verdict"]["rule"] == "quantized-sqnr"
    assert got["onnx-int8"]["accuracy"]["sqnr_db"] < 100, "int8 differs from the file it was built from"
    assert any("calibrated" in n for n in got["onnx-int8"]["notes"])
    assert any("left out executorch-int8: the executorch exporter builds from a PyTorch model" in n
               for n in report["notes"])
    assert "ort-opt-disable" in out and "float-sqnr" in out
    assert (tmp_path / "c" / "report.html").read_text().count("onnx-int8") >= 1


def test_an_onnx_file_from_the_onnx_package_gets_verdicts(run_cli, tmp_path):
    path = onnx_test_model("test_ConvTranspose2d")  # opset 6, IR 3: weights listed as graph inputs
    code, _, err = run_cli("compare", path, "--variant", "ort-opt-basic", "--variant", "onnx-int8", *FAST,
                           "-o", tmp_path / "c")
    assert code == 0, err
    _, got = verdicts(tmp_path / "c")
    assert {n: v["outcome"] for n, v in got.items()} == {"ort-opt-basic": "OK", "onnx-int8": "OK"}
    assert got["ort-opt-basic"]["accuracy"]["max_abs"] < 1e-4
    assert all(v["latency_ms_p50"] > 0 for v in got.values())


def test_a_named_plan_keeps_what_builds_from_the_file(mobilize_onnx):
    from mobilize.plans.file import plan_for_file

    plan, left_out = plan_for_file("runtimes", "onnx")
    assert [v.name for v in plan.variants][:2] == ["onnx-fp32", "onnx-int8"]
    assert ("litert-fp32, litert-int8", "the litert exporter builds from a PyTorch model, not from an onnx file") \
        in left_out


def test_a_file_no_plan_builds_from_is_refused(run_cli, tmp_path):
    import torch

    from tests.conftest import tiny_model

    torch.jit.script(tiny_model())._save_for_lite_interpreter(str(tmp_path / "tiny.ptl"))
    code, _, err = run_cli("compare", tmp_path / "tiny.ptl", "--input_dims", "1,3,32,32", "-o", tmp_path / "c")
    assert_one_line_error(code, err, "compare builds variants from a PyTorch model or an onnx or openvino or "
                                     "torchscript file", "a lite file")


def test_an_openvino_ir_is_the_reference_and_reads_back_into_each_precision(run_cli, tmp_path, mobilize_onnx):
    """An IR is read (OpenVINO's convert_model does not take one), re-saved with the precision pinned, and judged
    against the IR as the user saved it."""
    import openvino as ov

    xml = tmp_path / "user.xml"
    ov.save_model(ov.convert_model(str(mobilize_onnx)), str(xml))
    code, out, err = run_cli("compare", xml, "--variant", "openvino", "--variant", "openvino-fp16", *FAST,
                             "-o", tmp_path / "c")
    assert code == 0, err
    report, got = verdicts(tmp_path / "c")
    assert report["plan"] == "openvino-file" and report["reference_variant"] == "openvino"
    assert got["openvino"]["accuracy"]["sqnr_exact"], "the reference against itself"
    assert got["openvino-fp16"]["outcome"] == "OK", got["openvino-fp16"]["notes"]
    assert any("inference precision f16" in n for n in got["openvino-fp16"]["notes"])


@pytest.mark.slow
def test_the_whole_onnx_file_plan(run_cli, tmp_path, mobilize_onnx):
    code, _, err = run_cli("compare", mobilize_onnx, *FAST, "-o", tmp_path / "c")
    assert code == 0, err
    _, got = verdicts(tmp_path / "c")
    assert set(got) >= {"ort-opt-all", "ort-opt-extended", "ort-opt-basic", "ort-opt-disable", "onnx-int8",
                        "onnx-dynamic", "ort-format"}
    assert all(v["outcome"] == "OK" for v in got.values()), {n: v["notes"] for n, v in got.items()}
