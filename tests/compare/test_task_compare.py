"""`mobilize compare` speaks the model's task end to end (issue #23 item 5): the task is stated, the terminal,
report.json and report.html (read back in Chromium) use the task's measure and never say top-1 where there is no
class, and a wrong --metric is one line and exit 2."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from mobilize.report.json_report import validate
from tests.conftest import NO_RACE, assert_one_line_error

MODELS = "tests/task_models.py"
PLAN = ("name: task\nvariants:\n  - {name: eager-fp32}\n"
        "  - {name: coarse, passes: ['tests.compare_plugins:%s']}\n")


def _compare(run_cli, tmp_path, model: str, coarse: str, *args):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN % coarse)
    out = tmp_path / "out"
    code, stdout, err = run_cli("compare", f"{MODELS}:{model}", "--plan", plan, "--input_dims", "1,1,8,8",
                                "--data", "digits:test", "--accuracy-samples", "100", "--iter", "4", "--rounds", "2",
                                "--threads", "1", "--timeout", "120", *NO_RACE, "-o", out, *args)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    validate(report)
    return report, stdout, out


def header(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("variant "))


def dom_text(page) -> tuple[str, str]:
    """The page as Chromium renders it: its DOM, and the DOM's visible text."""
    from tests.report.test_html_browser import browser

    dom = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    return dom, re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def test_an_embedding_model_is_judged_on_cosine_and_neighbours_and_never_on_top1(run_cli, tmp_path):
    report, stdout, out = _compare(run_cli, tmp_path, "DigitEmbedder", "CoarseWeights12")
    assert "task: embedding (guessed from output shape (1,64); --task to override)" in stdout
    assert report["task"]["name"] == "embedding" and not report["task"]["given"]
    assert "nn@5 %" in header(stdout)
    for text in (stdout, (out / "report.json").read_text(), (out / "report.html").read_text()):
        assert "top-1" not in text.lower() and "top1" not in text.lower()
    from tests.report.test_html_browser import check_charts, measure

    check_charts(measure((out / "report.html").read_text(), tmp_path))  # labels inside their charts, no overlap
    dom, text = dom_text(out / "report.html")
    assert "task: embedding (guessed from output shape (1,64); --task to override)" in text
    assert "nn@5 %" in text and "neighbour recall@5" in text and "top-1" not in text
    coarse = next(v for v in report["variants"] if v["name"] == "coarse")
    assert coarse["outcome"] == "OK" and coarse["verdict"]["rule"] == "quantized-sqnr"
    assert "mean cosine" in coarse["verdict"]["reason"] and "neighbour recall@5" in coarse["verdict"]["reason"]
    measure = coarse["accuracy"]["task_measure"]
    assert measure["measure"] == "neighbour recall@5" and 50.0 < measure["value"] < 100.0


def test_a_segformer_shaped_model_is_judged_on_its_masks_without_being_told(run_cli, tmp_path):
    """Issue #67: a SegFormer's (1,C,H/4,W/4) logits were judged raw and an int8 file losing 15.5 mask-IoU points
    was recommended.  Signed per-pixel scores at a fraction of the image input are guessed segmentation, said so,
    and every variant is judged by mask IoU."""
    report, stdout, out = _compare(run_cli, tmp_path, "DigitSegFormer", "CoarseWeights")
    assert report["task"]["name"] == "segmentation" and not report["task"]["given"], report["task"]
    assert ("task: segmentation (guessed from output shape (1,5,4,4): 5 signed per-pixel scores at 1/2 of the 8x8 "
            "input; each pixel's arg-max is its class; --task to override)") in stdout
    assert "mIoU %" in header(stdout)
    coarse = next(v for v in report["variants"] if v["name"] == "coarse")
    assert coarse["accuracy"]["task_measure"]["measure"] == "mask IoU"
    # four levels a tensor lose mask-IoU points beyond the budget: judged by the masks, not the raw outputs' cosine
    assert coarse["outcome"] == "OVER_BUDGET" and coarse["verdict"]["rule"] == "budget-mask-iou-drop", coarse["verdict"]
    assert report["recommended"]["name"] == "eager-fp32"


@pytest.mark.slow  # a second compare run (~1 min on the shared VM); the measures themselves are in test_tasks.py
def test_a_detection_head_is_judged_on_its_boxes_in_terminal_json_and_chromium(run_cli, tmp_path):
    from tests.report.test_html_browser import check_charts, measure

    report, stdout, out = _compare(run_cli, tmp_path, "SplitBoxHead", "CoarseWeights", "--task", "detection")
    assert "task: detection (given with --task)" in stdout and "boxes %" in header(stdout)
    coarse = next(v for v in report["variants"] if v["name"] == "coarse")
    assert coarse["outcome"] == "OVER_BUDGET" and coarse["verdict"]["rule"] == "budget-box-drop"
    assert "budget-box-drop" in stdout and "top-1" not in stdout
    assert "top1" not in (out / "report.json").read_text()
    html = (out / "report.html").read_text()
    check_charts(measure(html, tmp_path))  # every label inside its chart, none overlapping
    dom, text = dom_text(out / "report.html")
    assert "task: detection (given with --task)" in text and "boxes matched at IoU 0.5 (%) vs the float model" in text
    assert "top-1" not in text and "boxes %" in text
    chart = re.search(r'<svg id="pareto-chart".*?</svg>', dom, re.S).group(0)
    ticks = [float(t) for t in re.findall(r'text-anchor="end">([-0-9.e]+)</text>', chart)]
    assert ticks and all(0.0 <= t <= 100.0 for t in ticks), ticks  # a percentage axis never leaves 0-100


def test_a_feature_map_is_refused_for_task_detection_in_one_line(run_cli_process, tmp_path):
    """#39 item 1: a (1,5,H,W) feature map was read as boxes (the float model matched 16.5% of its own)."""
    code, stdout, err = run_cli_process("compare", "zoo:conv_bn_relu", "--task", "detection", "--plan", "quick",
                                        "-o", tmp_path / "c")
    assert_one_line_error(code, err, "--task detection reads one output (1,N,4+1+C)", "(1,4+C,N)", "(1,N,4)",
                          "the output is 1x5x", "--task raw")
    assert "OVER_BUDGET" not in stdout and "boxes" not in stdout


def test_a_yolov8_head_is_read_by_columns_and_its_own_boxes_score_100(run_cli, tmp_path):
    """#40 item 7: a (1,4+C,N) head with zero-area boxes; the float model's twin scores 100%, a lossy one less."""
    report, stdout, out = _compare(run_cli, tmp_path, "YoloHead", "CoarseWeights", "--task", "detection")
    assert "task: detection (given with --task); read as (1,4+C,N) columns (YOLOv8)" in stdout
    got = {v["name"]: v for v in report["variants"]}
    same = got["eager-fp32"]["accuracy"]["task_measure"]
    assert same["value"] == 100.0 and same["drop"] == 0.0 and same["boxes_matched"] == same["boxes_reference"] > 0
    coarse = got["coarse"]["accuracy"]["task_measure"]
    assert coarse["layout"].startswith("read as (1,4+C,N) columns") and coarse["value"] < 100.0
    assert got["coarse"]["verdict"]["rule"] in ("budget-box-drop", "quantized-sqnr")


@pytest.mark.parametrize("spec, message", [("{tmp}/absent.py:f", "--metric file not found"),
                                           ("{tmp}/m.py:missing", "has no function 'missing'")])
def test_a_wrong_metric_is_one_line_and_exit_2(run_cli, tmp_path, spec, message):
    (tmp_path / "m.py").write_text("def f(outputs, reference_outputs, labels):\n    return 1.0\n")
    code, stdout, err = run_cli("compare", f"{MODELS}:DigitEmbedder", "--input_dims", "1,1,8,8", "--metric",
                                spec.format(tmp=tmp_path), "-o", tmp_path / "out")
    assert code == 2 and err.startswith("mobilize: error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.slow  # a whole tune search (~1 min on the shared VM)
def test_tune_judges_a_detection_head_on_its_boxes(run_cli, tmp_path):
    code, stdout, err = run_cli("tune", f"{MODELS}:BoxHead", "--task", "detection", "--input_dims", "1,1,8,8",
                                "--data", "digits:test", "--max-drop", "1", "--samples", "64", "-o", tmp_path / "t")
    assert code in (0, 2), err  # 2: no candidate within budget, said so
    report = json.loads((tmp_path / "t" / "tune-report.json").read_text())
    assert report["task"]["text"] == ("task: detection (given with --task); read as (1,N,4+1+C) rows: x1,y1,x2,y2, "
                                      "a score, class scores") and "task: detection" in stdout
    for c in report["candidates"]:
        assert c["task_measure"]["measure"] == "boxes matched at IoU 0.5" and "top1" not in json.dumps(c)
        assert c["verdict"]["rule"] in ("float-sqnr", "quantized-sqnr", "budget-box-drop"), c["verdict"]
    html = (tmp_path / "t" / "tune-report.html").read_text()
    assert "boxes %" in html and "top-1" not in html and "top1" not in json.dumps(report)
