"""report.html in a real browser (Debian's chromium, headless): the charts are drawn and no label
overlaps another or leaves its chart.  Layout is measured by the browser (getBoundingClientRect)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import torch

from mobilize.report.html import render_html

MEASURE = """<script>
(function () {
  const out = {};
  for (const id of ["latency-chart", "pareto-chart", "size-chart", "profile-chart"]) {
    const svg = document.getElementById(id);
    if (!svg) { out[id] = null; continue; }
    const frame = svg.getBoundingClientRect();
    const labels = [...svg.querySelectorAll("text")].map(t => {
      const b = t.getBoundingClientRect();  // after transforms (the rotated axis title)
      return {text: t.textContent, cls: t.getAttribute("class") || "", x: b.left - frame.left, y: b.top - frame.top,
              w: b.width, h: b.height};
    });
    out[id] = {marks: svg.querySelectorAll("rect,circle,polyline").length, labels: labels,
               width: svg.width.baseVal.value, height: svg.height.baseVal.value};
  }
  const pre = document.createElement("pre");
  pre.id = "layout-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def browser() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is not installed: scripts/setup.sh installs Debian's chromium (apt-get install chromium)")
    return path


def measure(html: str, tmp_path) -> dict:
    page = tmp_path / "report.html"
    page.write_text(html.replace("</body>", MEASURE + "</body>"))
    run = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', run.stdout, re.S)
    assert found, run.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


def overlaps(labels: list[dict], slack: float = 0.5) -> list[tuple[str, str]]:
    bad = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            if (a["x"] + slack < b["x"] + b["w"] and b["x"] + slack < a["x"] + a["w"]
                    and a["y"] + slack < b["y"] + b["h"] and b["y"] + slack < a["y"] + a["h"]):
                bad.append((a["text"], b["text"]))
    return bad


def crowded_report() -> dict:
    """Ten variants whose points nearly coincide: the hard case for label placement."""
    variants = []
    for i in range(10):
        p50 = 2.0 + 0.02 * i
        variants.append({
            "name": f"variant-with-a-long-name-{i}", "outcome": "OK", "stage": None, "notes": [], "artifact": None,
            "format": "onnx", "runtime": "onnxruntime", "size_bytes": 1_000_000 + i, "kind": "float",
            "latency_ms_p50": p50, "latency_ms_p10": p50 * 0.95, "latency_ms_p90": p50 * 1.1,
            "latency_ms_round_medians": [p50 * 0.98, p50, p50 * 1.03],
            "accuracy": {"top1": 98.0 + 0.05 * (i % 3), "samples": 539, "cosine": 0.999, "sqnr_db": 40.0,
                         "max_abs": 0.01, "finite": True},
            "verdict": {"outcome": "OK", "rule": "float-sqnr", "reason": "SQNR 40 dB >= 60 dB"},
            "speedup": {"ratio": 1.0, "low": 0.9, "high": 1.1, "significant": False},
        })
    return {"model": "zoo:test", "plan": "crowded", "data": "digits:test", "threads": 2, "rounds": 3, "iterations": 30,
            "complete": True, "labelled": True, "accuracy_samples": 539, "reference_variant": variants[0]["name"],
            "recommended": {"name": variants[0]["name"], "reason": "a tie", "tied": [variants[1]["name"]]},
            "variants": variants}


def check_charts(layout: dict) -> None:
    for chart in ("latency-chart", "pareto-chart", "size-chart"):
        got = layout[chart]
        assert got is not None and got["marks"] > 0, f"{chart} was not drawn"
        for label in got["labels"]:
            assert label["w"] > 0, f"{chart}: label {label['text']!r} has no extent"
            assert -0.5 <= label["x"] and label["x"] + label["w"] <= got["width"] + 0.5, (chart, label)
            assert -0.5 <= label["y"] and label["y"] + label["h"] <= got["height"] + 0.5, (chart, label)
        assert not overlaps(got["labels"]), (chart, overlaps(got["labels"]))


def test_crowded_charts_have_no_overlapping_labels(tmp_path):
    layout = measure(render_html(crowded_report()), tmp_path)
    check_charts(layout)
    points = [lb for lb in layout["pareto-chart"]["labels"] if lb["cls"] == "point-label"]
    assert len(points) == 10


def test_a_latency_tick_at_the_charts_left_edge_leaves_the_lowest_accuracys_label_alone(tmp_path):
    """Found on a real run (an embedding model, 0.02-ms files beside slower ones): the x axis's first tick sat under
    the y axis's lowest value and their labels overlapped."""
    report = crowded_report()
    for i, v in enumerate(report["variants"]):
        p50 = 0.025 if i == 0 else 2.0 + i  # the axis starts 10 ** -0.1 under it: at 0.0199, the 0.02 tick on it
        v.update(latency_ms_p50=p50, latency_ms_p10=p50, latency_ms_p90=p50, latency_ms_round_medians=[p50, p50])
    check_charts(measure(render_html(report), tmp_path))


def test_a_real_compare_report_renders(misbehaving_report, tmp_path):
    check_charts(measure(render_html(misbehaving_report), tmp_path))


def test_the_profile_of_a_model_fx_cannot_trace_adds_up_and_its_labels_fit(tmp_path):
    """The per-layer MAC chart of a non-FX-traceable model (long module paths): its rows partition the total and
    every label stays inside the chart (the start of long labels was clipped)."""
    from mobilize.lint import LintConfig, lint_section
    from mobilize.core.inputs import InputSpec
    from tests.lint.test_lint import NotTraceable

    class Deep(NotTraceable):
        def __init__(self):
            super().__init__()
            self.a_rather_long_encoder_name = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1)))

        def forward(self, x):
            return super().forward(x + self.a_rather_long_encoder_name(self.stem(x)).mean())

    lint = lint_section(Deep().eval(), LintConfig(targets=(), time=False), input_specs=[InputSpec((1, 3, 32, 32))])
    profile = lint["profile"]
    assert sum(r["macs"] for r in profile["rows"]) == profile["total_macs"] and not profile.get("rows_omitted")
    assert abs(sum(r["mac_share"] for r in profile["rows"]) - 1.0) < 1e-9
    layout = measure(render_html(dict(crowded_report(), lint=lint)), tmp_path)
    got = layout["profile-chart"]
    assert got is not None and got["marks"] >= len(profile["rows"])
    names = [lb for lb in got["labels"] if "a_rather_long_encoder_name" in lb["text"]]
    assert names, got["labels"]
    for label in got["labels"]:
        assert label["w"] > 0 and -0.5 <= label["x"] and label["x"] + label["w"] <= got["width"] + 0.5, label
    assert not overlaps(got["labels"])
