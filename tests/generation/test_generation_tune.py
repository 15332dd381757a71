"""tune for a causal LM: each int4 variant climbs its groups coarsest first and stops at the first within the
perplexity budget; the files within it are raced and the leader wins (zoo:tiny_lm on ONNX Runtime here; every
engine's own test builds its files)."""

from __future__ import annotations

import json

import pytest

from mobilize.core.outcome import Outcome
from mobilize.tune import decoder as gtune
from mobilize.generation.plan import generation_variants, split_group
from tests.conftest import assert_one_line_error


def test_group_names_build_with_their_group_and_are_refused_outside_the_offer():
    [v] = generation_variants(["openvino-int4@g64"])
    assert (v.name, v.group, v.engine) == ("openvino-int4@g64", 64, "openvino")
    assert split_group("onnx-int4") == ("onnx-int4", None)
    with pytest.raises(Exception, match="offers no group 48"):
        generation_variants(["onnx-int4@g48"])
    with pytest.raises(Exception, match="no int4 groups"):
        generation_variants(["onnx-fp32@g32"])


def test_every_int4_variant_offers_groups_and_the_ladder_skips_those_that_do_not_divide():
    int4 = [v for v in generation_variants() if v.weights == "int4"]
    # llama.cpp's types fix their blocks (Q4_0: 32 weights; Q4_K: 256 in sub-blocks of 32), and a peer CLI's file is
    # its own defaults (optimum-*, mobilize.core.peers): no group to choose
    grouped = [v for v in int4 if v.engine != "llamacpp" and not v.name.startswith("optimum-")]
    assert grouped and all(v.groups for v in grouped), [v.name for v in grouped if not v.groups]
    [litert] = [v for v in int4 if v.engine == "litert"]
    assert [r.name for r in gtune.ladder(litert, [256, 704])] == ["litert-int4@g32"]  # 704 is no multiple of 128
    [fp32] = generation_variants(["onnx-fp32"])
    assert gtune.ladder(fp32, [256, 704]) == [fp32]


def _planted_run(tmp_path):
    """The parts of a PlanRun the climb reads, over a model folder with the tiny model's linear widths."""

    class Run:
        workdir = tmp_path
        reference = type("Ref", (), {"warning": None})()
        variants: list = []
        results: dict = {}
        workers: dict = {}

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"hidden_size": 256, "intermediate_size": 704}))
    return Run


def test_the_ladder_stops_at_the_first_group_within_the_budget(monkeypatch, tmp_path):
    """Planted verdicts: g128 and g64 over the budget, g32 within: g16 is never built, and the report says why each
    step went on or stopped."""
    import importlib

    cvariants = importlib.import_module("mobilize.compare.variants")
    from mobilize.report.results import TokenFigures

    built: list[str] = []

    def fake_check(run, step):
        built.append(step.name)
        r = run.results[step.name]
        r.outcome = Outcome.OVER_BUDGET if step.variant.group >= 64 else Outcome.OK
        r.tokens = TokenFigures("onnxruntime", "int4", "", ppl_increase_percent=9.0 if step.variant.group >= 64 else 1.0)

    Run = _planted_run(tmp_path)
    monkeypatch.setattr(cvariants, "check_one", fake_check)
    climb = gtune.Climb(generation_variants(["onnx-int4"]), None)
    climb(Run())
    assert built == ["onnx-int4@g128", "onnx-int4@g64", "onnx-int4@g32"]  # MatMulNBits pads a partial block
    assert [s["stop"] for s in climb.steps] == ["OVER_BUDGET: next, group 64", "OVER_BUDGET: next, group 32",
                                                "within the budget"]


def test_a_rung_starts_only_while_more_time_is_left_than_the_longest_took(monkeypatch, tmp_path):
    """#48 item 12 (tune --time-budget 3m ran 415 s): with planted rung times of 100 s on a clock that advances only
    when a rung runs, a 250 s budget builds two rungs, not a third that would end at 300 s, and says why; a run
    that still went over says by how much and where the time went."""
    import importlib

    cvariants = importlib.import_module("mobilize.compare.variants")
    now = [1000.0]
    monkeypatch.setattr(gtune.time, "monotonic", lambda: now[0])

    def slow_check(run, step):
        now[0] += 100.0
        run.results[step.name].outcome = Outcome.OVER_BUDGET

    Run = _planted_run(tmp_path)
    monkeypatch.setattr(cvariants, "check_one", slow_check)
    climb = gtune.Climb(generation_variants(["onnx-int4"]), 250.0)
    climb(Run())
    assert [s["name"] for s in climb.steps] == ["onnx-int4@g128", "onnx-int4@g64"]
    assert climb.cut_short == ["onnx-int4@g32 and the rest of its ladder not tried: 50 s left of the time budget "
                               "(250 s), less than the longest rung so far (100 s)"]
    over = climb.overrun({"stage_seconds": {"total": 415.0, "wall": {"reference": 20.0, "variants": 200.0,
                                                                     "timed_rounds": 190.0, "rest": 5.0}}})
    assert over.startswith("time budget: 250 s, the run took 415 s (165 s over; the float reference 20 s, the "
                           "ladders 200 s, the timed rounds 190 s)"), over
    assert climb.overrun({"stage_seconds": {"total": 240.0}}) is None


@pytest.mark.slow  # 86 s: five ONNX Runtime builds; the climb is tested on planted verdicts above, and tune's run on
# a decoder end to end by test_tune_on_a_random_init_decoder_says_no_budget_means_anything
def test_tune_picks_a_decoder_file_within_the_budget(run_cli_process, tmp_path):
    out = tmp_path / "tune"
    code, stdout, err = run_cli_process("tune", "zoo:tiny_lm", "--runtimes", "onnxruntime", "--max-ppl-increase",
                                        "50", "-o", out)
    assert code == 0, err[-2000:]
    report = json.loads((out / "tune-report.json").read_text())
    tried = [s["name"] for s in report["tune"]["steps"]]
    # every ONNX Runtime file: the float ones, and each int4 ladder's first rung - g128 is within a 50% budget, so
    # the finer groups are not built
    assert sorted(tried) == ["onnx-fp32", "onnx-genai-fp32", "onnx-genai-int4-mixed@g128", "onnx-genai-int4@g128",
                             "onnx-int4@g128"]
    winner = report["tune"]["winner"]
    assert winner in tried and f"winner: {winner}" in stdout
    assert f"--recipe {winner}" in stdout and (out / "tune-report.html").exists()
    assert report["recommended"]["rule"].startswith("race-")


@pytest.mark.parametrize("extra,message", [
    (("--data", "digits:test"), "--data is not an option for a causal LM"),
    (("--runtimes", "tensorrt"), "no decoder files for engine 'tensorrt'"),
    (("--max-ppl-increase", "0"), "--max-ppl-increase"),
])
def test_tune_refuses_what_a_causal_lm_cannot_take(run_cli, tmp_path, extra, message):
    code, _, err = run_cli("tune", "zoo:tiny_lm", *extra, "-o", tmp_path / "o")
    assert_one_line_error(code, err, message)


def test_a_perplexity_budget_on_a_tensor_model_is_refused(run_cli, tmp_path):
    code, _, err = run_cli("tune", "zoo:conv_bn_relu", "--input_dims", "1,3,8,8", "--data", "digits:test",
                           "--max-ppl-increase", "1", "-o", tmp_path / "o")
    assert_one_line_error(code, err, "--max-ppl-increase is a causal LM's budget")


def test_tune_on_a_random_init_decoder_says_no_budget_means_anything(run_cli_process, tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1,
                                 max_position_embeddings=256)).save_pretrained(tmp_path / "lm")
    out = tmp_path / "tune"
    code, _, err = run_cli_process("tune", tmp_path / "lm", "--runtimes", "onnxruntime", "-o", out)
    assert code == 2 and "near uniform" in err, err[-2000:]
    tune = json.loads((out / "tune-report.json").read_text())["tune"]
    assert tune["steps"] == [] and "VACUOUS" in tune["stopped"]  # refused before any file is built
