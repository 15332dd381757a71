"""A ``file.py:Class`` model is timed in compare's shared timing host like a zoo model: its module pickled by
the checking worker unpickles there because every process imports the user's file under one name
(:attr:`mobilize.sources.reference.ModelRef.module_name`), so its timing workers cost what the zoo model's do."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mobilize.sources.reference import ModelRef

USER_FILE = '''
import torch
from torch import nn


class Net(nn.Module):
    """The zoo's conv_bn_relu, written as a user would (same layers, same input)."""

    input_specs = [(1, 3, 224, 224)]

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3)
        self.bn = nn.BatchNorm2d(5)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))
'''


def _compare(model: str, out) -> dict:
    ran = subprocess.run([sys.executable, "-m", "mobilize", "compare", model, "--plan", "quick", "--rounds", "2",
                          "--accuracy-samples", "4", "--time-budget", "1", "-o", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads((out / "report.json").read_text())


def test_the_user_files_module_name_is_the_same_in_every_process(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(USER_FILE)
    ref = ModelRef.parse(f"{path}:Net")
    here = ref.module_name
    there = subprocess.run([sys.executable, "-c", "import sys; from mobilize.sources.reference import ModelRef; "
                            "print(ModelRef.parse(sys.argv[1]).module_name)", f"{path}:Net"],
                           capture_output=True, text=True, timeout=120).stdout.strip()
    assert here == there and here.startswith("mobilize_user_")


@pytest.mark.e2e
def test_a_file_model_is_hosted_and_costs_what_the_zoo_model_costs(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(USER_FILE)
    user = _compare(f"{path}:Net", tmp_path / "user")
    zoo = _compare("zoo:conv_bn_relu", tmp_path / "zoo")
    for report in (user, zoo):
        torch_timed = [v for v in report["variants"] if v.get("timing_worker") not in (None, "lean")]
        assert torch_timed and all(v["timing_worker"] == "host" for v in torch_timed), \
            [(v["name"], v.get("timing_worker")) for v in report["variants"]]
        assert len(report["timing_memory"]["processes"]) == 1
    assert user["timing_memory"]["peak_mb"] <= 1.5 * zoo["timing_memory"]["peak_mb"], (user["timing_memory"],
                                                                                        zoo["timing_memory"])
