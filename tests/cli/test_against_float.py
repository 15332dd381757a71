"""What a verdict is measured against: a file faithful to its prepared int8 model but lossy against the float
model is OVER_BUDGET in optimize as in compare, with both halves (fidelity, quality) stated."""

from __future__ import annotations

import json

import numpy as np

LOSSY = '''
import torch


class Lossy(torch.nn.Module):
    """A Linear int8 cannot hold: one huge weight on a pixel that is 0 in every digit sets the per-tensor weight
    scale, so every other weight rounds to a few levels (about 12 dB against float, cosine ~0.97)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(64, 10)
        with torch.no_grad():
            self.fc.weight.normal_()
            self.fc.weight[0, 0] = 100.0

    def forward(self, x):
        return self.fc(torch.flatten(x, 1))
'''
RECIPE = "name: lossy\npasses:\n  - quantize: {mode: static, engine: qnnpack}\nexports:\n  - torchscript: {}\n"
PLAN = "name: lossy\nvariants:\n  - {name: eager-fp32}\n  - {name: int8-file, recipe: RECIPE}\n"


def test_a_lossy_int8_file_is_over_budget_in_optimize_as_in_compare(run_cli, tmp_path):
    from sklearn.datasets import load_digits

    (tmp_path / "lossy.py").write_text(LOSSY)
    (tmp_path / "r.yaml").write_text(RECIPE)
    (tmp_path / "plan.yaml").write_text(PLAN.replace("RECIPE", str(tmp_path / "r.yaml")))
    images = load_digits().images[:48].astype("float32")[:, None] / 16  # no labels: the budget is the cosine
    assert not images[:, 0, 0, 0].any()
    np.savez(tmp_path / "x.npz", x=images)
    model, data = f"{tmp_path / 'lossy.py'}:Lossy", str(tmp_path / "x.npz")

    code, out, err = run_cli("optimize", model, "--recipe", tmp_path / "r.yaml", "--data", data, "--input_dims",
                             "1,1,8,8", "-o", tmp_path / "o", "--json", tmp_path / "o.json")
    assert code == 0, err
    assert "OVER_BUDGET (quality vs the float model: OVER_BUDGET" in out and "verified" not in out, out
    assert "fidelity vs the model it was exported from: max abs 0.0e+00, SQNR exact (inf dB)" in out
    deprecations = [ln.strip() for ln in out.splitlines() if "upstream deprecation:" in ln]
    assert deprecations and all(ln.endswith((".", "…")) for ln in deprecations), deprecations  # never mid-word
    (art,) = json.loads((tmp_path / "o.json").read_text())["artifacts"]
    v = art["verify"]
    assert v["outcome"] == "OVER_BUDGET" and v["rule"] == "budget-cosine" and v["fidelity"]["outcome"] == "OK"
    assert 0.9 < v["quality"]["numbers"]["cosine"] < 0.99

    code, out, err = run_cli("compare", model, "--plan", tmp_path / "plan.yaml", "--data", data, "--input_dims",
                             "1,1,8,8", "--iter", "4", "--rounds", "1", "--threads", "1", "-o", tmp_path / "c")
    assert code == 0, err
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    got = {r["name"]: r for r in report["variants"]}
    int8 = got["int8-file"]["verdict"]
    assert got["int8-file"]["outcome"] == "OVER_BUDGET" and int8["rule"] == "budget-cosine"
    assert int8["fidelity"]["outcome"] == "OK" and int8["fidelity"]["numbers"]["sqnr_db"] is None  # exact
    assert int8["quality"]["against"] == "the float model" and int8["quality"]["numbers"]["cosine"] < 0.99
    assert got["eager-fp32"]["verdict"]["fidelity"] is None  # no file: nothing exported to be faithful to
    row = next(line for line in out.splitlines() if line.startswith("int8-file"))
    assert "OVER_BUDGET" in row and " exact " in row and "budget-cosine" in row
    assert "fidelity: the file vs the model it was exported from" in out
    page = (tmp_path / "c" / "report.html").read_text()
    assert ">fidelity</th>" in page and "quality vs the float model" in page
