"""Issue #65 item 3: ``mobilize list`` shows everything there is - the decoder recipes (each engine's files, their
``NAME@gN`` int4 groups), the generation plan, and the engines that run decoders (llama.cpp, onnxruntime-genai) with
whether they run here - and ``--json`` gives the same to scripts."""

from __future__ import annotations

import json

from mobilize.generation.plan import generation_variants


def test_list_names_every_decoder_recipe_the_generation_plan_and_the_decoder_engines(run_cli):
    code, out, err = run_cli("list")
    assert code == 0, err
    recipes = out.split("recipes:")[1].split("plans:")[0]
    for v in generation_variants():  # the registry, not a list kept here
        assert f"  {v.name} " in recipes and f"[decoder] {v.engine}" in recipes, v.name
        for g in v.groups:
            assert f"{v.name}@g{g}" in recipes
    plans = out.split("plans:")[1].split("runtimes:")[0]
    assert "\n  generation " in plans
    runtimes = out.split("runtimes:")[1].split("passes:")[0]
    assert "llamacpp (decoders)" in runtimes and "llama_cpp" in runtimes
    assert "onnxruntime_genai" in runtimes
    assert all("available here" in line for line in runtimes.strip().splitlines()), runtimes


def test_list_json_is_the_same_listing_for_scripts(run_cli, tmp_path):
    code, out, err = run_cli("list", "recipes", "--json", "-")
    assert code == 0, err
    listing = json.loads(out)
    names = [r["name"] for r in listing["recipes"]]
    assert "onnx-fp32" in names and "llamacpp-q4_k_m" in names and "executorch-8da4w" in names
    code, _, err = run_cli("list", "--json", tmp_path / "all.json")
    assert code == 0 and "wrote" in err
    written = json.loads((tmp_path / "all.json").read_text())
    assert set(written) == {"zoo", "recipes", "plans", "runtimes", "passes", "exporters", "targets"}
