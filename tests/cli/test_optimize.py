"""`mobilize optimize` with recipes: artifacts + manifests, bundled inputs, and bad recipes."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from mobilize.pipeline.recipe import Recipe, builtin_recipe_names, dump_recipe, load_recipe
from tests.conftest import assert_one_line_error

USER_MODEL = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(x + self.bn2(self.conv2(y)))   # plain residual add, no FloatFunctional


class Net(nn.Module):
    """Written as a user would: no QuantStub/DeQuantStub, no fuse_model()."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.Sequential(Block(8), Block(8))
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
'''


def manifest(path) -> dict:
    return json.loads(path.with_name(path.name + ".manifest.json").read_text())


def test_seed_recipe_on_conv_bn_relu(run_cli, tmp_path):
    out = tmp_path / "out"
    code, stdout, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", "seed", "-o", out)
    assert code == 0, err
    fidelity = "verified (fidelity vs the model it was exported from: max abs 0.0e+00, SQNR exact (inf dB) >= 60 dB"
    assert stdout.count(fidelity) == 2, stdout
    assert len(re.findall(r"quality vs the float model: max abs [\d.e+-]+, SQNR [\d.]+ dB >= 8 dB \(rule quantized-sqnr\)"
                          r".*mean cosine 0\.\d+ within budget 0.99\)", stdout)) == 2, stdout
    pt, ptl = out / "conv_bn_relu-seed.pt", out / "conv_bn_relu-seed.ptl"
    for path, fmt in ((pt, "torchscript"), (ptl, "lite")):
        m = manifest(path)
        assert m["format"] == fmt and m["size_bytes"] == path.stat().st_size
        assert m["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert m["recipe"]["name"] == "seed" and m["input_specs"][0]["shape"] == [1, 3, 224, 224]
        assert any("optimize_for_mobile skipped" in n and "ExecuTorch" in n for n in m["notes"])
        code, stdout, err = run_cli("bench", path, "--use_bundled_input", "0", "--iter", "3")
        assert code == 0, err
        assert "Main run finished. Microseconds per iter:" in stdout


@pytest.mark.parametrize("model,dims", [("zoo:mobilenet_v2", "1,3,64,64"), ("zoo:toy_classifier", "1,3,64,64")])
def test_seed_recipe_on_zoo_models_small_inputs(run_cli, tmp_path, model, dims):
    out = tmp_path / "out"
    code, stdout, err = run_cli("optimize", model, "--recipe", "seed", "--data", "sample-photos:8",
                                "--input_dims", dims, "-o", out, "--json", tmp_path / "r.json")
    assert code == 0, err
    result = json.loads((tmp_path / "r.json").read_text())
    assert [a["format"] for a in result["artifacts"]] == ["torchscript", "lite"]
    for a in result["artifacts"]:  # faithful to the prepared int8 model; its cost against float is stated
        assert a["verify"]["fidelity"]["outcome"] == "OK" and a["verify"]["fidelity"]["rule"] == "float-sqnr"
        assert a["verify"]["quality"]["against"] == "the float model"
        assert a["verify"]["quality"]["numbers"]["sqnr_db"] < 60
    if model == "zoo:toy_classifier":  # random init: the same logits for every photo
        assert all(a["verify"]["outcome"] == "VACUOUS" for a in result["artifacts"])
        assert "WARNING: the float model's output does not depend on the input" in stdout
        assert "train or load weights; random init gives near-constant outputs" in stdout
    assert any("a real sample from sample-photos:8" in n for n in result["artifacts"][0]["notes"])
    for artifact in result["artifacts"]:
        code, stdout, err = run_cli("bench", artifact["artifact"], "--use_bundled_input", "0", "--iter", "2")
        assert code == 0, err


@pytest.mark.slow
@pytest.mark.parametrize("model", ["zoo:conv_bn_relu", "zoo:mobilenet_v2", "zoo:toy_classifier"])
def test_seed_recipe_full_size(run_cli, tmp_path, model):
    code, _, err = run_cli("optimize", model, "--recipe", "seed", "--data", "sample-photos:16", "-o", tmp_path)
    assert code == 0, err
    for suffix in (".pt", ".ptl"):
        path = next(tmp_path.glob(f"*{suffix}"))
        code, stdout, err = run_cli("bench", path, "--use_bundled_input", "0", "--iter", "3")
        assert code == 0 and "Main run finished" in stdout, err


def test_user_model_goes_through_seed_untouched(run_cli, tmp_path):
    source = tmp_path / "usernet.py"
    source.write_text(USER_MODEL)
    before = source.read_bytes()
    code, stdout, err = run_cli("optimize", f"{source}:Net", "--recipe", "seed", "--engine", "x86",
                                "--input_dims", "1,3,32,32", "--data", "sample-photos:8", "-o", tmp_path / "out")
    assert code == 0, err
    assert source.read_bytes() == before
    notes = manifest(tmp_path / "out" / "Net-seed.pt")["notes"]
    assert any("FX graph mode" in n and "x86" in n for n in notes)
    assert any("fused 5 Conv-BN (1 with ReLU)" in n for n in notes)
    assert any("'blocks.0.relu', called 2 times, kept separate" in n for n in notes)
    code, stdout, err = run_cli("bench", tmp_path / "out" / "Net-seed.ptl", "--use_bundled_input", "0", "--iter", "2")
    assert code == 0, err


def test_recipes_round_trip(tmp_path):
    for name in builtin_recipe_names():
        recipe = load_recipe(name)
        assert Recipe.from_dict(recipe.to_dict(), name) == recipe
        for suffix in (".yaml", ".json"):
            dump_recipe(recipe, tmp_path / f"{name}{suffix}")
            assert load_recipe(str(tmp_path / f"{name}{suffix}")) == recipe


@pytest.mark.parametrize("text,fragment", [
    ("passes: [fuse, sharpen]\nexports: [torchscript]", "unknown pass 'sharpen'"),
    ("passes: [{quantize: {mode: static, engin: x86}}]\nexports: [torchscript]", "did you mean: engine?"),
    ("passes: [{quantize: {mode: fast}}]\nexports: [torchscript]", "bad mode 'fast'"),
    ("passes: [torchscript, quantize]\nexports: [lite]", "step 'torchscript' is an exporter"),
    ("passes: [fuse]\nexports: []", "has no exports"),
    ("passes: [quantize, fuse]\nexports: [torchscript]", "put fuse before quantize"),
])
def test_bad_recipes(run_cli, tmp_path, text, fragment):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    out = tmp_path / "out"
    code, _, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", recipe, "-o", out)
    assert_one_line_error(code, err, fragment)
    assert not out.exists() or not any(out.iterdir()), "nothing may be written"


def test_unknown_builtin_recipe(run_cli, tmp_path):
    code, _, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", "sed", "-o", tmp_path)
    assert_one_line_error(code, err, "unknown recipe 'sed'", "did you mean: seed")


def test_data_folder_without_images(run_cli, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("no images here")
    code, _, err = run_cli("optimize", "zoo:conv_bn_relu", "--data", tmp_path / "empty", "-o", tmp_path / "out")
    assert_one_line_error(code, err, "has no images")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_model_that_cannot_be_scripted_or_traced(run_cli, tmp_path):
    (tmp_path / "bad.py").write_text(
        "import torch\n"
        "class Bad(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return {'a': x.tolist()}\n")
    out = tmp_path / "out"
    code, _, err = run_cli("optimize", f"{tmp_path / 'bad.py'}:Bad", "--recipe", "torchscript-fp32",
                           "--input_dims", "1,3", "-o", out)
    assert_one_line_error(code, err, "[export]", "neither scripted nor traced")
    assert not out.exists() or not any(out.iterdir()), "no half-written file may remain"


def test_output_folder_is_a_file(run_cli, tmp_path):
    (tmp_path / "taken").write_text("x")
    assert_one_line_error(*run_cli("optimize", "zoo:conv_bn_relu", "-o", tmp_path / "taken")[::2], "is a file")
