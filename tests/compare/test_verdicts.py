"""Verdicts users can trust, end to end through `mobilize compare`: one float model for every
variant (even unseeded), margin-aware correctness, the accuracy budget, recommendations, real data
for a two-input integer model with an embedding output."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from tests.conftest import NO_RACE

UNSEEDED = textwrap.dedent("""
    import torch
    from torch import nn

    class Unseeded(nn.Module):
        '''Random initialisation and no seed: every process that builds it gets other weights.'''
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                      nn.Flatten(), nn.Linear(8, 10))
            self.body[1].running_mean.uniform_(-1, 1)

        def forward(self, x):
            return self.body(x)

    class TextEncoder(nn.Module):
        '''Two int64 inputs (token ids and an attention mask), an embedding out.'''
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 32)
            self.proj = nn.Linear(32, 24)

        def forward(self, input_ids, attention_mask):
            h = self.embed(input_ids) * attention_mask.unsqueeze(-1).to(torch.float32)
            pooled = h.sum(1) / attention_mask.sum(1, keepdim=True).clamp(min=1).to(torch.float32)
            return {"embedding": self.proj(pooled)}
""")


def _compare(run_cli, tmp_path, *args):
    out = tmp_path / "out"
    code, stdout, err = run_cli("compare", *args, "--iter", "4", "--rounds", "2", "--threads", "1",
                                "--timeout", "120", *NO_RACE, "-o", out)
    assert code == 0, err
    return json.loads((out / "report.json").read_text()), stdout


def test_an_unseeded_model_gives_every_variant_the_same_weights(run_cli, tmp_path):
    (tmp_path / "models.py").write_text(UNSEEDED)
    report, stdout = _compare(run_cli, tmp_path, f"{tmp_path / 'models.py'}:Unseeded", "--plan", "quick",
                              "--input_dims", "1,3,32,32", "--data", "sample-photos:8")
    got = {v["name"]: v["outcome"] for v in report["variants"]}
    assert got == {"eager-fp32": "OK", "fused": "OK", "torchscript-frozen": "OK"}, report["variants"]
    eager = next(v for v in report["variants"] if v["name"] == "eager-fp32")
    assert eager["accuracy"]["sqnr_exact"] and eager["verdict"]["rule"] == "float-sqnr"
    assert report["recommended"]["name"] in got and "why:" in stdout


def test_a_lossy_variant_beyond_the_budget_is_over_budget_and_never_recommended(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: budget\nvariants:\n  - {name: eager-fp32}\n"
                    "  - {name: coarse, passes: ['tests.compare_plugins:CoarseWeights12']}\n")
    report, stdout = _compare(run_cli, tmp_path, "zoo:digits_mobilenet_v2", "--plan", plan, "--data", "digits:test",
                              "--accuracy-samples", "300", "--max-drop", "1")
    coarse = next(v for v in report["variants"] if v["name"] == "coarse")
    assert coarse["outcome"] == "OVER_BUDGET" and coarse["verdict"]["rule"] == "budget-top1-drop", coarse["verdict"]
    assert coarse["accuracy"]["top1_drop"] > 1 and coarse["accuracy"]["top1_drop_ci95"][0] <= coarse["accuracy"]["top1_drop"]
    assert coarse["latency_ms_p50"] > 0, "over-budget variants stay in the table with their speed"
    assert report["recommended"]["name"] == "eager-fp32"
    assert "OVER_BUDGET" in stdout and "budget-top1-drop" in stdout


def test_two_named_int64_inputs_from_an_npz_and_an_embedding_output(run_cli, tmp_path):
    (tmp_path / "models.py").write_text(UNSEEDED)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 100, size=(12, 16)).astype(np.int64)
    mask = (rng.random((12, 16)) > 0.2).astype(np.int64)
    np.savez(tmp_path / "tokens.npz", attention_mask=mask, input_ids=ids)  # stored in the other order: matched by name
    report, _ = _compare(run_cli, tmp_path, f"{tmp_path / 'models.py'}:TextEncoder", "--plan", "quick",
                         "--input_dims", "1,16;1,16", "--input_type", "int64;int64", "--data", tmp_path / "tokens.npz")
    assert report["accuracy_samples"] == 12 and report["labelled"] is False
    for v in report["variants"]:
        assert v["outcome"] == "OK", v
        assert v["accuracy"]["outputs"][0]["name"] == "embedding"
        assert "cosine" in v["verdict"]["reason"] and v["verdict"]["numbers"]["min_cosine"] == 0.99


def test_an_npz_that_feeds_the_wrong_number_of_inputs_is_refused_before_work(run_cli, tmp_path):
    (tmp_path / "models.py").write_text(UNSEEDED)
    np.savez(tmp_path / "one.npz", x=np.zeros((4, 16), dtype=np.int64))
    code, _, err = run_cli("compare", f"{tmp_path / 'models.py'}:TextEncoder", "--input_dims", "1,16;1,16",
                           "--input_type", "int64;int64", "--data", tmp_path / "one.npz", "-o", tmp_path / "o")
    assert code == 2 and "feeds 1 input(s), but the model takes 2" in err
    assert not (tmp_path / "o" / "report.json").exists()


@pytest.mark.parametrize("bad", [b"random bytes, not a zip", None])
def test_an_unreadable_npz_never_suggests_unpickling(run_cli, tmp_path, bad):
    path = tmp_path / "bad.npz"
    if bad is None:
        np.savez(path, x=np.array([{"a": 1}], dtype=object))
    else:
        path.write_bytes(bad)
    code, _, err = run_cli("compare", "zoo:conv_bn_relu", "--data", path, "-o", tmp_path / "o")
    assert code == 2 and "allow_pickle" not in err and "cannot read" in err or "Python objects" in err
