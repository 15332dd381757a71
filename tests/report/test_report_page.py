"""report.html and the terminal on a classifier's (and a raw model's) report, as issue #48 items 8 and 11 found
them: a broken file off the Pareto front, one "cosine" column, the reference's warning once, a CI level that is
not rounded up to 100%, two all-zero outputs not called a perfect cosine, the tie's why line whole; and every
section a real table."""

from __future__ import annotations

import copy
import re

from mobilize.bench.racing import level_text, look_level
from mobilize.report.html import accuracy_chart, render_html
from mobilize.report.terminal import format_table, summary_lines
from tests.report.test_html_browser import crowded_report

WARNING = ("WARNING: the float model's output is exactly 0 for all 8 samples: every accuracy check against it is "
           "vacuous (rule vacuous-reference); fix: train or load weights; random init gives near-constant outputs")


def raw_report() -> dict:
    """A raw output model (no classes, no labels): the task's measure is the cosine itself."""
    report = copy.deepcopy(crowded_report())
    report.update(labelled=False, task={"name": "raw", "given": True, "why": "given", "reading": None,
                                        "text": "task: raw (given with --task)"})
    for v in report["variants"]:
        v["accuracy"] = {"samples": 8, "finite": True, "cosine": 0.99991, "sqnr_db": 41.0, "max_abs": 0.002,
                         "task": "raw"}
    return report


def test_a_mismatch_file_is_never_on_the_pareto_front():
    """The fastest and most accurate point is a broken file: the front is drawn through the working ones."""
    variants = copy.deepcopy(crowded_report()["variants"][:3])
    variants[0].update(outcome="MISMATCH", accuracy={**variants[0]["accuracy"], "top1": 99.9})
    variants[0]["verdict"] = {"outcome": "MISMATCH", "rule": "float-sqnr", "reason": "SQNR 3 dB < 60 dB"}
    svg = accuracy_chart(variants, "top1")
    assert "variant-with-a-long-name-0 ★" not in svg and "variant-with-a-long-name-1 ★" in svg
    assert "Not on it: variant-with-a-long-name-0 (MISMATCH)" in svg


def test_a_raw_model_s_results_table_has_one_cosine_column():
    page = render_html(raw_report())
    results = re.search(r'<table id="results">(.*?)</table>', page, re.S).group(1)
    heads = re.findall(r"<th[^>]*>(.*?)</th>", results)
    assert heads.count("cosine") == 1, heads
    assert "<td>0.99991</td>" in results


def test_a_vacuous_reference_s_warning_is_printed_once():
    """Once in full, in the summary: each VACUOUS verdict and note (which compare writes with the warning's text)
    points to it."""
    report = dict(crowded_report(), reference_warning=WARNING)
    body = WARNING.removeprefix("WARNING: ")
    for v in report["variants"]:
        v.update(outcome="VACUOUS", notes=[f"VACUOUS: {body}"])
        v["verdict"] = {**v["verdict"], "outcome": "VACUOUS", "rule": "vacuous-reference", "reason": body,
                        "reference_warning": WARNING}
    page = render_html(report)
    text = re.sub(r"<[^>]*>", "", page)  # what the page shows (a rule's tooltip is not printed)
    assert text.count("every accuracy check against it is vacuous") == 1
    assert re.search(r'<p class="bad"><b>WARNING: the float model', page)
    verdicts = re.search(r'<table id="verdicts">(.*?)</table>', page, re.S).group(1)
    assert verdicts.count("the float reference&#x27;s warning above") == 10


def test_a_ci_level_after_many_looks_is_not_rounded_up_to_100_percent():
    assert level_text(look_level(155)) == "99.9999%"
    assert level_text(look_level(1)) == "97.0%" and level_text(look_level(2)) == "99.24%"


def test_the_cosine_of_two_all_zero_outputs_is_not_printed_as_a_perfect_one():
    report = raw_report()
    for v in report["variants"]:
        v["accuracy"].update(cosine=1.0, sqnr_db=None, sqnr_exact=True, max_abs=0.0,
                             first_output={"values_per_sample": 10, "zero_share": 1.0, "range": 0.0, "peak": 0.0,
                                           "max_abs": 0.0})
    page = render_html(report)
    results = re.search(r'<table id="results">(.*?)</table>', page, re.S).group(1)
    assert "1.00000" not in results and results.count("<td>both all zero</td>") == 10
    assert "1.0000" not in format_table(report) and " all zero " in format_table(report)


def test_the_why_line_of_a_tie_is_the_whole_reason():
    """The reason holds colons (": a tie [rule race-tie]; ... for this CPU: ...") and is printed whole."""
    report = crowded_report()
    reason = ("fastest OK variant at 2.00 ms p50, but after 155 paired rounds (31 s of the 30 s time budget) still "
              "within noise of variant-with-a-long-name-1 (variant-with-a-long-name-0 is 1.01x as fast as "
              "variant-with-a-long-name-1, 99.9999% CI 0.97-1.05 includes 1, the level of the race's last look): a "
              "tie [rule race-tie]; timed on each file alone; this ranking holds for this CPU: AMD EPYC (x86_64; "
              "AVX2); on another CPU (a phone's arm64 core) the files may rank differently: compare there")
    report["recommended"]["reason"] = reason
    lines = summary_lines(report)
    assert lines[1] == f"  why: {reason}"
    assert f"<p>  why: {reason.replace(chr(39), '&#x27;')}</p>" in render_html(report)


def test_every_section_of_the_page_is_a_table():
    report = dict(crowded_report(), notes=["removed the previous run's report.json"],
                  stage_seconds={"total": 60.0, "reference": 2.0, "lint": 3.0, "export": {"a": 4.0},
                                 "load_accuracy": {"a": 2.0, "b": 5.0}, "profile": {}, "timer_start": {},
                                 "timed_rounds": 20.0})
    report["variants"][0]["notes"] = ["fuse: fused 3 Conv-BN"]
    page = render_html(report)
    assert "<pre>" not in page
    for table in ("results", "verdicts", "notes", "time-split"):
        assert f'<table id="{table}">' in page, table
    split = re.search(r'<table id="time-split">(.*?)</table>', page, re.S).group(1)
    assert "load + accuracy checks" in split and "b 5.0 s" in split and "total (wall clock)" in split
    verdicts = re.search(r'<table id="verdicts">(.*?)</table>', page, re.S).group(1)
    assert verdicts.count("float-sqnr") == 10 and "SQNR 40 dB" in verdicts
