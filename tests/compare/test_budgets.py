"""Budgets beyond accuracy (issue #65 item 1): the pick is the fastest file within every budget, each file that
misses one says which (its rule), and no file within them is exit status 4 with the report written."""

from __future__ import annotations

import json

from tests.conftest import NO_RACE


def test_the_pick_keeps_to_the_budgets_and_none_met_is_status_4(run_cli, tmp_path):
    code, out, err = run_cli("compare", "zoo:conv_bn_relu", "--plan", "quick", "--rounds", "3", *NO_RACE,
                             "--max-size-mb", "1", "-o", tmp_path / "a")
    assert code == 0, err
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    variants = {v["name"]: v for v in report["variants"]}
    pick = variants[report["recommended"]["name"]]
    assert pick["artifact"] and pick["size_bytes"] <= 1e6  # a file under 1 MB, not an eager module
    assert report["budgets"]["within"] == ["torchscript-frozen"]
    for name in ("eager-fp32", "fused"):  # no file to ship: outside a size budget
        assert report["budgets"]["missed"][name][0]["rule"] == "budget-size"
        assert variants[name]["notes"][0].startswith("budget: no file to ship")
    assert "budgets (max_size_mb 1): 1 OK file(s) within them" in out

    code, out, err = run_cli("compare", "zoo:conv_bn_relu", "--plan", "quick", "--rounds", "3", *NO_RACE,
                             "--max-latency-ms", "0.001", "--latency-p", "90", "-o", tmp_path / "b")
    assert code == 4, err
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert report["recommended"] is None and report["budgets"]["none_met"]
    ok = [v for v in report["variants"] if v["outcome"] == "OK"]
    assert ok and all(report["budgets"]["missed"][v["name"]][0]["text"].startswith("p90 ") for v in ok)
    assert all("[rule budget-latency]" in v["notes"][0] for v in ok)
    assert "no pick: none of the 3 OK file(s) is within the budgets" in out
    assert "(exit status 4)" in out


def test_a_budget_is_a_positive_number(run_cli, tmp_path):
    code, _, err = run_cli("compare", "zoo:conv_bn_relu", "--max-size-mb", "0", "-o", tmp_path / "c")
    assert code == 2 and "--max-size-mb 0: a budget is a positive number" in err
    assert not (tmp_path / "c").exists()
