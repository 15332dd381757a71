"""tune-report.html from a tune-report.json: candidates, the per-layer SQNR chart per route, the time-weighted
profile and its WARNING; self-contained, and laid out without overlaps in a real browser (headless chromium)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess

import pytest

from mobilize.report.tune_html import render_tune_html, write_tune_html


def tune_report() -> dict:
    """A tune-report.json as :class:`mobilize.tune.TuneResult` writes it, from the real dataclasses."""
    from mobilize.accuracy.verify import Kind, Policy, Verdict
    from mobilize.core.outcome import Outcome
    from mobilize.profile.core import OpTime, TimeProfile
    from mobilize.tune import Candidate, TuneResult, onnx_recipe
    from mobilize.backends.onnxruntime.drift import LayerError

    def cand(name, outcome, rule, reason, top1, p50, lost, kind=Kind.QUANTIZED, excluded=()):
        c = Candidate(name, onnx_recipe(name), "onnxruntime", kind=kind, verdict=Verdict(outcome, rule, reason),
                      top1=top1, drop_points=96.0 - top1, drop_ci=(96.0 - top1 - 0.5, 96.0 - top1 + 0.6),
                      cosine=0.99912, excluded=excluded, latency_ms_p50=p50, lost=lost,
                      round_medians_ms=[p50 * 0.97, p50, p50 * 1.04] if p50 else [])
        return c

    candidates = [
        cand("onnx-fp32", Outcome.OK, "float-sqnr", "SQNR 120 dB", 96.0, 0.80, "slower: onnx-int8-minmax-float1 "
             "is 1.60x as fast (95% CI 1.50-1.70)", kind=Kind.FLOAT),
        cand("onnx-int8-minmax", Outcome.OVER_BUDGET, "budget-top1-drop", "top-1 drop +4.00 points > budget 1",
             92.0, None, "OVER_BUDGET: top-1 drop +4.00 points > budget 1"),
        cand("onnx-int8-minmax-float1", Outcome.OK, "quantized-sqnr", "within budget", 95.6, 0.50, None,
             excluded=("node_conv1", "node_relu1")),
    ]
    layers = [LayerError(f"relu_{i}_output_of_a_rather_long_layer_name", f"node_relu{i}", "Relu", (f"node_conv{i + 1}",),
                         30.0 - i, 25.0 - 2 * i, 3.2 + 4 * i) for i in range(6)]
    layers.append(LayerError("graph_output", "node_fc", "Gemm", (), 40.0, 20.0, math.inf))
    # the ExecuTorch route's rows as mobilize.backends.executorch.drift.LayerError.to_json writes them: one more series
    et_layers = [{"tensor": f"relu_{i}", "producer": f"features.{i}", "op_type": "conv2d+relu", "consumers": [],
                  "keep_float": [f"features.{i}"], "unnamed": [], "qdq_sqnr_db": 31.0 - i, "drift_sqnr_db": 24.0 - i,
                  "alone_sqnr_db": 12.0 + 3 * i, "alone_float_sqnr_db": 20.0 + i} for i in range(4)]
    result = TuneResult(candidates, candidates[2], 96.0, [], {"onnx-int8-minmax": layers}, False, 41.5)
    ops = [OpTime("XNNPACK delegate call", "instruction 0", "XNNPACK", True, 120.0),
           OpTime("aten.avg_pool2d", "instruction 1", "portable", False, 2900.0),
           OpTime("XNNPACK delegate call", "instruction 2", "XNNPACK", True, 60.0)]
    profile = TimeProfile("model.pte", "executorch", "ETDump", "XNNPACK", 1, 20, 3100.0, ops, ops_in_delegate=7,
                          ops_total=8)
    report = result.to_json()
    report["layers"]["executorch-int8"] = et_layers
    return {**report, "policy": Policy(max_drop_points=1.0).to_json(), "profiles": {"executorch-fp32": profile.to_json()}}


def test_page_holds_candidates_layers_and_profile(tmp_path):
    report = tune_report()
    path = tmp_path / "tune-report.json"
    path.write_text(json.dumps(report))
    out = write_tune_html(path)
    page = out.read_text()
    assert out.name == "tune-report.html"
    assert "<script" not in page and "http://" not in page and "https://" not in page  # self-contained
    table = re.search(r'<table id="candidates">(.*?)</table>', page, re.S).group(1)
    assert table.count("<tr>") == 4 and "onnx-int8-minmax-float1 ★" in table
    assert "budget-top1-drop" in table and "OVER_BUDGET: top-1 drop +4.00 points" in table and "slower:" in table
    assert "top-1 drop ≤ 1.0 points" in page
    chart = re.search(r'<svg id="layers-onnx-int8-minmax".*?</svg>', page, re.S).group(0)
    assert chart.count("<rect") >= 7 * 3  # seven layers, three SQNR series each (+ legend)
    assert "3.2 dB" in chart and ">-<" in chart  # the graph output's alone SQNR is not finite: JSON null, no bar
    assert "model output, only this layer quantized" in chart
    et_chart = re.search(r'<svg id="layers-executorch-int8".*?</svg>', page, re.S).group(0)
    assert et_chart.count("<rect") == 4 * 4 + 4 and "model output, only this layer kept float" in et_chart
    assert "WARNING: 1 op outside XNNPACK takes 94% of the measured time: aten.avg_pool2d" in page
    # the where-the-time-goes chart adds up to the run: the runtime's own 20 us between ops is a bar too
    profile = re.search(r'<svg id="profile-executorch-fp32".*?</svg>', page, re.S).group(0)
    assert "runtime between ops" in profile and "0.6% (0.020 ms)" in profile
    assert "The bars add up to the run's 3.100 ms." in page


MEASURE = """<script>
(function () {
  const out = {};
  for (const svg of document.querySelectorAll("svg")) {
    const frame = svg.getBoundingClientRect();
    out[svg.id] = {marks: svg.querySelectorAll("rect").length, width: frame.width, height: frame.height,
      labels: [...svg.querySelectorAll("text")].map(t => { const b = t.getBoundingClientRect();
        return {text: t.textContent, x: b.left - frame.left, y: b.top - frame.top, w: b.width, h: b.height}; })};
  }
  const pre = document.createElement("pre");
  pre.id = "layout-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def test_charts_are_drawn_without_overlaps_in_a_browser(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium is not installed: scripts/setup.sh installs Debian's chromium (apt-get install chromium)")
    page = tmp_path / "tune.html"
    page.write_text(render_tune_html(tune_report()).replace("</body>", MEASURE + "</body>"))
    run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', run.stdout, re.S)
    assert found, run.stderr[-2000:]
    layout = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                        .replace("&gt;", ">"))
    assert {"latency-chart", "layers-onnx-int8-minmax", "layers-executorch-int8", "profile-executorch-fp32"} <= set(layout)
    for chart, got in layout.items():
        assert got["marks"] > 0, chart
        labels = got["labels"]
        for lb in labels:
            assert lb["w"] > 0 and -0.5 <= lb["x"] and lb["x"] + lb["w"] <= got["width"] + 0.5, (chart, lb)
            assert -0.5 <= lb["y"] and lb["y"] + lb["h"] <= got["height"] + 0.5, (chart, lb)
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                assert not (a["x"] + 0.5 < b["x"] + b["w"] and b["x"] + 0.5 < a["x"] + a["w"]
                            and a["y"] + 0.5 < b["y"] + b["h"] and b["y"] + 0.5 < a["y"] + a["h"]), (chart, a, b)
