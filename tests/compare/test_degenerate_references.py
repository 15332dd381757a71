"""`mobilize compare` names a degenerate float reference whatever it is (issue #40 items 1 and 9): a module whose
logits are subnormal (random-init MobileViT's are ~1e-40) is VACUOUS with its reason and no export is blamed
for its scale; a constant-output file is VACUOUS as the same module would be."""

from __future__ import annotations

import json

from tests.conftest import NO_RACE

FAST = ("--iter", "2", "--rounds", "1", "--accuracy-samples", "16", "--threads", "1", "--timeout", "120", *NO_RACE)

SUBNORMAL = '''
import torch
from torch import nn


class SubnormalNet(nn.Module):
    """A tiny conv net whose last Linear is scaled by 1e-41: logits of ~1e-42, subnormal as random-init MobileViT's (~1e-40)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(8, 10)
        with torch.no_grad():
            self.fc.weight.mul_(1e-41)
            self.fc.bias.mul_(1e-41)

    def forward(self, x):
        return self.fc(self.body(x))
'''


def test_a_subnormal_reference_is_vacuous_and_no_export_is_blamed(run_cli_process, tmp_path):
    (tmp_path / "subnormal.py").write_text(SUBNORMAL)
    out = tmp_path / "c"
    # executorch-fp32 runs XNNPACK, which flushes the subnormal logits to exactly 0 (MISMATCH at 0 dB before)
    code, stdout, err = run_cli_process("compare", f"{tmp_path / 'subnormal.py'}:SubnormalNet", "--variant",
                                        "eager-fp32", "--variant", "executorch-fp32", "--input_dims", "1,3,16,16",
                                        *FAST, "-o", out)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert "subnormal" in report["reference_warning"] and "rule vacuous-subnormal-reference" in \
        report["reference_warning"]
    got = {v["name"]: v for v in report["variants"]}
    assert set(got) == {"eager-fp32", "executorch-fp32"}
    for v in got.values():
        assert v["outcome"] == "VACUOUS" and v["verdict"]["rule"] == "vacuous-subnormal-reference", v["verdict"]
        assert (v["verdict"]["fidelity"] or {}).get("outcome") in (None, "OK", "VACUOUS")
    assert "MISMATCH" not in stdout and "float model's output is subnormal" in stdout


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


def test_a_constant_output_file_is_named_degenerate_as_its_module_is(run_cli, tmp_path):
    import importlib.util

    from mobilize.core.context import Context
    from mobilize.core.inputs import InputSpec
    from mobilize.exporters import EXPORTERS

    (tmp_path / "constant.py").write_text(CONSTANT)
    spec = importlib.util.spec_from_file_location("constant_for_file", tmp_path / "constant.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = EXPORTERS.get("onnx")().export(module.Constant().eval(), Context(input_specs=[InputSpec((1, 3, 16, 16))]),
                                          tmp_path / "constant").path
    code, stdout, err = run_cli("compare", path, "--variant", "ort-opt-disable", *FAST, "-o", tmp_path / "c")
    assert code == 0, err
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    assert "does not depend on the input" in report["reference_warning"]
    assert "rule vacuous-reference" in report["reference_warning"]
    (variant,) = report["variants"]
    assert variant["outcome"] == "VACUOUS" and variant["verdict"]["rule"] == "vacuous-reference"
    assert "WARNING: the float model's output does not depend on the input" in stdout
