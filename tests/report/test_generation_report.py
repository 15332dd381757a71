"""The decoder report (task ``generation``) through the one report path: the terminal table's decoder columns,
report.html's tables (a row per file with its TTFT and memory) and its tokens/s vs perplexity chart, checked in a
real browser (Debian's chromium, headless): it renders, both axes carry tick numbers, no two labels overlap."""

from __future__ import annotations

import json
import re
import subprocess

from mobilize.report.html import render_html
from mobilize.report.terminal import format_table, summary_lines
from tests.report.test_html_browser import browser, overlaps

HELD_OUT = "16 x 128 tokens of the tiny_lm corpus (held-out split)"


def _tokens(engine: str, weights: str, ms: float, ttft: float, ppl: float, ci: float, agree: float,
            matched: list[int], peak: float, bound: float | None = None) -> dict:
    """A variant's ``tokens`` as compare writes it (decode per token, prefill, perplexity, agreement)."""
    return {"engine": engine, "weights": weights, "how": f"{engine}'s own generation stack", "group": None,
            "ttft_ms_p50": ttft, "ttft_ms_rounds": [ttft * 0.98, ttft, ttft * 1.05],
            "decode_ms_per_token_p50": ms, "decode_ms_per_token_p90": ms * 1.08, "decode_tokens_per_s": 1000.0 / ms,
            "bound_tokens_per_s": None if bound is None else 1000.0 / ms / bound * 100,
            "percent_of_bound": bound, "cache_resident": bound is None, "bytes_per_token": 4_000_000,
            "cache_rule": f"measured: its 4 MB working set read at {90.0 if bound is None else 21.0} GB/s, DRAM 20.0 "
                          f"GB/s: {'' if bound is None else 'not '}cache-resident (rule: >= 1.5x DRAM)",
            "ppl_reference": 12.31,
            "ppl_candidate": 12.31 * (1 + ppl / 100), "ppl_increase_percent": ppl,
            "ppl_increase_percent_low": ppl - ci, "ppl_increase_percent_high": ppl + ci, "top1_agreement": agree,
            "continuation_match_tokens": matched, "continuation_tokens": 32, "cache_sqnr_db": 61.0 if weights == "fp32"
            else 28.5, "logits_sqnr_db": 118.0 if weights == "fp32" else None, "check_peak_rss_mb": peak,
            "footprint_mb": peak and peak / 8, "baseline_mb": 55.0, "footprint_peak_mb": peak and 55.0 + peak / 8}


def _variant(name: str, outcome: str, fmt: str, runtime: str, size_mb: float | None, tokens: dict | None,
             speedup: tuple[float, float, float] | None, rule: str, reason: str, notes: list[str] = ()) -> dict:
    ms = tokens["decode_ms_per_token_p50"] if tokens else None
    return {
        "name": name, "outcome": outcome, "stage": "export" if outcome == "EXPORT_FAIL" else None,
        "notes": list(notes), "artifact": f"artifacts/{name}/model.{fmt}" if tokens else None, "format": fmt,
        "runtime": runtime, "kind": "float" if name.endswith("fp32") else "quantized",
        "size_bytes": int(size_mb * 1e6) if size_mb else None,
        "verdict": None if tokens is None else {"ok": outcome == "OK", "outcome": outcome, "rule": rule,
                                                 "reason": reason, "numbers": {}, "fidelity": None, "quality": None,
                                                 "reference_warning": None},
        **({"latency_ms_p50": ms, "latency_ms_p90": ms * 1.08} if ms else {}),  # a file never timed has no p50
        "latency_ms_round_medians": [ms * 0.99, ms, ms * 1.02] if ms else [],
        "speedup": None if speedup is None else {"ratio": speedup[0], "low": speedup[1], "high": speedup[2],
                                                 "reference": "eager-fp32",
                                                 "significant": not speedup[1] <= 1.0 <= speedup[2]},
        "peak_rss_mb": tokens and tokens["check_peak_rss_mb"] * 0.8, "details": {}, "tokens": tokens,
        "load_ms": 120.0 if tokens else None, "first_run_ms": 30.0 if tokens else None, "accuracy": None,
        "round_spread_percent": 3.0 if ms else None, "frames": None, "on_device_only": False,
    }


def decoder_report() -> dict:
    """A compare report of nine decoder files: OK ones (float and quantized), one over the perplexity budget, one
    MISMATCH (its KV cache), one EXPORT_FAIL (no file, ``tokens`` null); speed-ups with their intervals, one a
    tie."""
    ok = "perplexity {:.3g} vs 12.3 float ({:+.2f}%, 95% CI ...), next-token agreement {:.1f}% (rule {})"
    v = [
        _variant("eager-fp32", "OK", "eager", "torch", 33.1, _tokens("eager", "fp32", 4.10, 21.0, 0.0, 0.0, 1.0,
                 [32, 32, 32, 32], 612.0, 61.0), (1.0, 1.0, 1.0), "float-sqnr", ok.format(12.31, 0, 100, "float-sqnr")),
        _variant("eager-int8wo", "OK", "eager", "torch", 9.2, _tokens("eager", "int8", 3.05, 19.5, 0.35, 0.2, 0.981,
                 [32, 27, 32, 30], 530.0, 55.0), (1.34, 1.25, 1.44), "budget-ppl-increase",
                 ok.format(12.35, 0.35, 98.1, "budget-ppl-increase")),
        _variant("executorch-fp32", "OK", "pte", "executorch", 33.0, _tokens("executorch", "fp32", 2.52, 9.8, 0.0,
                 0.0, 1.0, [32, 32, 32, 32], 301.0, 88.0), (1.63, 1.55, 1.71), "float-sqnr",
                 ok.format(12.31, 0, 100, "float-sqnr"), ["executorch: custom SDPA and KV-cache ops"]),
        _variant("executorch-8da4w", "OK", "pte", "executorch", 6.1, _tokens("executorch", "int4", 0.61, 4.2, 1.92,
                 0.6, 0.942, [18, 32, 25, 32], 240.0), (6.72, 6.30, 7.15), "budget-ppl-increase",
                 ok.format(12.55, 1.92, 94.2, "budget-ppl-increase")),
        _variant("onnx-fp32", "OK", "onnx", "onnxruntime", 33.2, _tokens("onnxruntime", "fp32", 2.49, 8.7, 0.0, 0.0,
                 1.0, [32, 32, 32, 32], 402.0, 89.0), (1.65, 1.58, 1.73), "float-sqnr",
                 ok.format(12.31, 0, 100, "float-sqnr")),
        _variant("onnx-int4", "OK", "onnx", "onnxruntime", 6.4, _tokens("onnxruntime", "int4", 0.63, 4.0, 2.10, 0.7,
                 0.939, [20, 32, 22, 31], 251.0), (6.50, 5.90, 7.10), "budget-ppl-increase",
                 ok.format(12.57, 2.10, 93.9, "budget-ppl-increase")),
        _variant("openvino-int8", "OVER_BUDGET", "xml", "openvino", 9.0, _tokens("openvino", "int8", 0.62, 5.1, 7.80,
                 1.9, 0.874, [6, 11, 3, 32], 388.0), (6.61, 0.95, 12.2), "budget-ppl-increase",
                 "perplexity 13.3 vs 12.3 float (+7.80%): over the 5% budget (rule budget-ppl-increase)",
                 ["OVER_BUDGET: perplexity +7.80% over the 5% budget"]),
        _variant("openvino-int4", "MISMATCH", "xml", "openvino", 6.0, _tokens("openvino", "int4", 0.58, 3.9, 310.0,
                 40.0, 0.12, [0, 1, 0, 0], 377.0), None, "cache-consistency",
                 "the file's decode steps give 3.1 dB against its own prefill of the same positions, below 20 dB: its "
                 "KV cache is wrong (rule cache-consistency)", ["MISMATCH: its KV cache is wrong"]),
        _variant("litert-int4", "EXPORT_FAIL", "tflite", "litert", None, None, None, "-", "",
                 ["export: litert-torch's generative path needs a model with a registered builder"]),
    ]
    return {
        "model": "zoo:tiny_lm", "plan": "generation", "data": None, "threads": 2, "rounds": 5, "iterations": 32,
        "complete": True, "unit": "token", "reference_variant": "eager-fp32", "policy": {"max_ppl_increase_percent": 5.0},
        "recommended": {"name": "executorch-8da4w", "tied": ["onnx-int4"], "rule": "race-tie", "verdict": "", "unit": "token",
                        "picked_on": "token", "scope": {"text": "this ranking holds for this CPU: AMD EPYC"},
                        "reason": "fastest OK variant at 0.61 ms p50, but after 12 paired rounds (14 s) still within "
                                  "noise of onnx-int4 (executorch-8da4w is 1.03x as fast as onnx-int4, 99.24% CI "
                                  "0.98-1.09 includes 1, the level of the race's last look): a tie [rule race-tie]; "
                                  "timed on decode time per token; this ranking holds for this CPU: AMD EPYC"},
        "racing": None, "machine_load": {"cores": 2, "seconds": 31.0, "others_cpu_share": 0.02, "steal_share": 0.0,
                                                "busy": False}, "host_cpu": {"model": "AMD EPYC 9R14"},
        "stage_seconds": {"total": 171.0, "reference": 6.2, "lint": None, "export": {"onnx-int4": 21.0,
                          "executorch-8da4w": 48.5}, "load_accuracy": {"onnx-int4": 7.1, "executorch-8da4w": 9.4},
                          "profile": {}, "timer_start": {}, "timed_rounds": 31.0},
        "notes": ["tokenizer: the model folder's own (4096 ids)"], "reference_warning": None,
        "task": {"name": "generation", "given": False, "why": "a causal LM (zoo:tiny_lm)", "reading": None,
                 "text": "task: generation (guessed: a causal LM; --task to override)"},
        "generation": {"held_out": HELD_OUT, "parameters": 8_300_000, "vocab_size": 4096, "prompt_tokens": 32,
                       "gen_tokens": 32, "eval_sequences": 16, "eval_tokens": 128, "continuations": 4, "max_len": 161,
                       "bandwidth": {"gb_per_s": 14.2}},
        "variants": v,
    }


def test_the_fixture_is_a_report_json_compare_writes():
    """The decoder report these tests render validates against report.json's schema (as compare's does)."""
    from mobilize.report.json_report import validate

    validate({**decoder_report(), "schema_version": 2})


def test_the_terminal_table_has_the_decoder_columns_and_figures():
    report = decoder_report()
    lines = format_table(report).splitlines()
    for head in ("engine/format", "weights", "tok/s", "ms/tok", "TTFT ms", "speedup", "size MB", "+mem MB",
                 "ppl +% (95% CI)", "agree %", "cont.", "rule", "notes"):
        assert head in lines[0], head
    rows = {line.split()[0]: line for line in lines[2:11]}
    fast = rows["executorch-8da4w"]
    for cell in ("executorch/pte", "int4", "1639", "0.610", "4.20", "6.72x", "6.10", " 30 ", "+1.92 [+1.3,+2.5]",
                 "94.2", "18/32", "budget-ppl-increase"):
        assert cell in fast, (cell, fast)
    assert "0.95" not in rows["openvino-int8"] and "6.61x~" in rows["openvino-int8"]  # a tie: inside its interval
    assert " cache " in rows["executorch-8da4w"] and " 89 " in rows["onnx-fp32"]  # %bound, or cache-resident
    assert "+310 [+270,+350]" in rows["openvino-int4"]  # a broken file's figures still fit the column
    failed = rows["litert-int4"]
    assert "EXPORT_FAIL" in failed and "litert/tflite" in failed and "generative path" in failed
    text = "\n".join(lines)
    assert HELD_OUT in text and "32-token prompt" in text and "same token ids in every runtime" in text
    assert "14.2 GB/s" in text


def test_the_timed_files_come_fastest_first_and_failures_last():
    names = [line.split()[0] for line in format_table(decoder_report()).splitlines()[2:11]]
    assert names[:2] == ["openvino-int4", "executorch-8da4w"]  # by time per token, as every task's table
    assert names[-2:] == ["eager-fp32", "litert-int4"]


def test_the_pick_is_said_per_token_with_its_perplexity_and_the_whole_why():
    report = decoder_report()
    lines = summary_lines(report)
    assert lines[0] == ("recommended (tie): executorch-8da4w at 0.610 ms/token p50 (1639 tokens/s), 6.72x vs "
                        "eager-fp32, perplexity +1.92%")
    assert lines[1] == f"  why: {report['recommended']['reason']}"  # whole, colons and all
    assert "task: generation" in lines[2] and any(line.startswith("time: ") for line in lines)


def test_the_page_has_a_table_row_per_file_with_its_ttft_and_memory():
    page = render_html(decoder_report())
    assert "<pre>" not in page and "tokens/s" in page
    results = re.search(r'<table id="results">(.*?)</table>', page, re.S).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", results, re.S)
    assert len(rows) == 1 + 9  # the heading, then one row per file
    heads = re.findall(r"<th[^>]*>(.*?)</th>", rows[0])
    assert {"TTFT ms", "+mem MB", "check MB", "tok/s", "ms/tok", "ppl +% (95% CI)", "agree %", "cont.", "rule"} <= set(heads)
    fast = next(r for r in rows if ">executorch-8da4w</td>" in r)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", fast)
    assert cells[heads.index("TTFT ms")] == "4.20" and cells[heads.index("+mem MB")] == "30" and \
        cells[heads.index("check MB")] == "240"
    assert cells[heads.index("ppl +% (95% CI)")] == "+1.92 [+1.3,+2.5]" and cells[heads.index("cont.")] == "18/32"
    failed = next(r for r in rows if ">litert-int4</td>" in r)
    assert "EXPORT_FAIL" in failed and "litert/tflite" in failed
    for section in ('id="verdicts"', 'id="notes"', 'id="time-split"', 'id="tokens-key"', 'id="tokens-chart"'):
        assert section in page, section
    assert "cache-consistency" in re.search(r'<table id="verdicts">(.*?)</table>', page, re.S).group(1)
    assert "Not plotted: openvino-int4 (MISMATCH), litert-int4 (EXPORT_FAIL)" in page
    assert HELD_OUT in page


def test_broken_and_failed_files_are_not_plotted():
    from mobilize.report.html_generation import chart

    report = decoder_report()
    svg = chart([v for v in report["variants"] if v["outcome"] in ("OK", "OVER_BUDGET")], report)
    assert svg.count("<circle") == 7 and "openvino-int4" not in svg and "litert-int4" not in svg


def test_the_ranges_are_set_by_the_points_not_the_widest_interval():
    """A file whose interval runs to +40% keeps the x axis near its points (0-8%): its whisker is cut."""
    from mobilize.report.html_generation import chart

    report = decoder_report()
    wide = [v for v in report["variants"] if v["outcome"] == "OK"]
    wide[3]["tokens"]["ppl_increase_percent_high"] = 40.0
    wide[2]["tokens"]["decode_tokens_per_s"] = 20000.0  # rates far apart: the padding must not go below 0
    svg = chart(wide, report)
    ticks = [float(t) for t in re.findall(r'class="tick-x"[^>]*>([-0-9.]+)<', svg)]
    assert ticks[0] <= 0 and 2.1 <= ticks[-1] <= 4
    rates = [float(t) for t in re.findall(r'class="tick-y"[^>]*>([-0-9.]+)<', svg)]
    assert rates[0] == 0 and rates[-1] >= 20000


MEASURE = """<script>
(function () {
  const svg = document.getElementById("tokens-chart");
  const frame = svg.getBoundingClientRect();
  const labels = [...svg.querySelectorAll("text")].map(t => {
    const b = t.getBoundingClientRect();
    return {text: t.textContent, cls: t.getAttribute("class") || "", x: b.left - frame.left, y: b.top - frame.top,
            w: b.width, h: b.height};
  });
  const rows = document.querySelectorAll("#results tr").length;
  const pre = document.createElement("pre");
  pre.id = "layout-check";
  pre.textContent = JSON.stringify({labels: labels, width: svg.width.baseVal.value, height: svg.height.baseVal.value,
                                    marks: svg.querySelectorAll("circle").length, rows: rows});
  document.body.appendChild(pre);
})();
</script>"""


def _layout(page: str, tmp_path) -> dict:
    path = tmp_path / "report.html"
    path.write_text(page.replace("</body>", MEASURE + "</body>"))
    run = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
                         capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', run.stdout, re.S)
    assert found, run.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


def test_the_decoder_page_in_a_browser_has_numbered_axes_and_no_overlapping_labels(tmp_path):
    layout = _layout(render_html(decoder_report()), tmp_path)
    assert layout["marks"] == 7 and layout["rows"] == 1 + 9
    labels = layout["labels"]
    base = max(lb["y"] for lb in labels if lb["cls"] == "tick-x")
    for axis, along in (("tick-x", "x"), ("tick-y", "y")):
        ticks = [lb for lb in labels if lb["cls"] == axis]
        assert len(ticks) >= 3 and all(re.fullmatch(r"-?[0-9.]+", t["text"]) for t in ticks), ticks
        assert axis == "tick-x" or min(float(t["text"]) for t in ticks) >= 0  # no negative tokens/s
        assert len({round(t[along]) for t in ticks}) == len(ticks), ticks  # spread along their axis
    assert all(lb["y"] <= base + 1 for lb in labels if lb["cls"] == "point-label")  # inside the plot, above the axis
    titles = {lb["text"] for lb in labels if lb["cls"] == "axis"}
    assert titles == {"perplexity increase vs float (%)", "decode tokens/s"}
    for label in labels:
        assert label["w"] > 0 and -0.5 <= label["x"] and label["x"] + label["w"] <= layout["width"] + 0.5, label
        assert -0.5 <= label["y"] and label["y"] + label["h"] <= layout["height"] + 0.5, label
    assert not overlaps(labels), overlaps(labels)


def test_the_decoder_page_screenshot_shows_the_chart(tmp_path):
    """A screenshot of the rendered page: the chart's markers are drawn in their colours."""
    from PIL import Image

    page = tmp_path / "report.html"
    page.write_text(render_html(decoder_report()))
    shot = tmp_path / "report.png"
    subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1100,900",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert shot.exists(), "chromium wrote no screenshot"
    colours = {c for _, c in Image.open(shot).convert("RGB").getcolors(1 << 20)}
    assert (0x15, 0x65, 0xC0) in colours and (0xE6, 0x51, 0x00) in colours  # OK and OVER_BUDGET markers


def test_residency_weighs_a_working_set_against_the_dram_read_beside_it():
    """Issue #63 item 2, seen at Qwen2.5-0.5B's shape (2026-12-02): a 346 MB Q4_0 working set read at 54.0 GB/s in
    a fast moment of the VM's memory, 1.6x the rounds' median DRAM 33.4 GB/s, was called cache-resident; the whole
    buffer read right after it (55 GB/s) is the figure it is weighed against, and it is DRAM-bound."""
    from mobilize.report.results import TokenFigures

    read = 346_206_720
    band = {"gb_per_s": 33.4, "at_size_gb_per_s": {str(read): 54.0}, "at_size_dram_gb_per_s": {str(read): 55.0}}
    t = TokenFigures("llamacpp", "int4", "Q4_0", bytes_per_token=read).timed([400.0], 16.0, 17.0, band, None)
    assert t.cache_resident is False and t.percent_of_bound is not None
    assert "DRAM 55.0 GB/s (the whole buffer read right after it): not cache-resident" in t.cache_rule
    small = TokenFigures("llamacpp", "int4", "Q4_0", bytes_per_token=3_000_000).timed(
        [1.0], 0.2, 0.3, {"gb_per_s": 33.4, "at_size_gb_per_s": {"3000000": 120.0},
                          "at_size_dram_gb_per_s": {"3000000": 34.0}}, None)
    assert small.cache_resident is True and small.percent_of_bound is None
