"""A float model whose output does not depend on its input: every command warns, and accuracy verdicts that would
be OK are VACUOUS (rule vacuous-reference) with the fix.  (compare: the shared ToyClassifier run in
tests/compare/test_compare.py, whose random init gives the same logits for every photo.)"""

from __future__ import annotations

import json

CONSTANT = '''
import torch


class Constant(torch.nn.Module):
    """A classifier whose last layer was zeroed: logits are its bias, whatever the input."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4, 10)
        with torch.no_grad():
            self.fc.weight.zero_()

    def forward(self, x):
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1), 1))
'''
FIX = "train or load weights; random init gives near-constant outputs"


def test_optimize_and_tune_call_checks_against_a_constant_model_vacuous(run_cli, tmp_path):
    (tmp_path / "constant.py").write_text(CONSTANT)
    model = f"{tmp_path / 'constant.py'}:Constant"
    code, out, err = run_cli("optimize", model, "--recipe", "onnx-fp32", "--input_dims", "1,3,8,8", "--data",
                             "digits:test", "-o", tmp_path / "o", "--json", tmp_path / "o.json")
    assert code == 0, err
    assert "WARNING: the float model's output does not depend on the input" in out and FIX in out
    (art,) = json.loads((tmp_path / "o.json").read_text())["artifacts"]
    assert art["verify"]["outcome"] == "VACUOUS" and art["verify"]["rule"] == "vacuous-reference"
    assert art["verify"]["fidelity"]["outcome"] == "OK"  # the file is still what the exporter promised
    assert "VACUOUS (the float model's output does not depend on the input" in out

    from mobilize.core.inputs import InputSpec
    from mobilize.sources.models import resolve_model
    from mobilize.tune import tune

    lines: list[str] = []
    module = resolve_model(model).module
    result = tune(module, [InputSpec((1, 3, 8, 8))], data="digits:test", out_dir=tmp_path / "t", stem="constant",
                  eval_samples=16, calibration_samples=8, rounds=1, iterations=2, echo=lines.append)
    assert any(line.startswith("WARNING: the float model's output") and FIX in line for line in lines), lines
    judged = [c for c in result.candidates if c.verdict is not None]
    assert judged and all(c.verdict.outcome in ("VACUOUS", "MISMATCH", "OVER_BUDGET") for c in judged)
    assert any(c.verdict.outcome == "VACUOUS" for c in judged) and result.winner is None
    assert FIX in json.loads((tmp_path / "t" / "tune-report.json").read_text())["reference_warning"]
