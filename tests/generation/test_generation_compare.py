"""compare on a causal LM: decoder files built by each engine's own tool, judged token by token and timed in
tokens (zoo:tiny_lm on ONNX Runtime fp32 and int4 here, seconds each; every engine's own test builds its files),
with the verdict rules and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mobilize.accuracy.decoder_verdict import TokenComparison, continuation_match
from mobilize.accuracy.generation import measure_tokens, near_uniform, score_sequences
from mobilize.accuracy.verify import assess
from mobilize.core.outcome import Outcome
from mobilize.report.json_report import validate
from tests.conftest import assert_one_line_error

pytest.importorskip("onnxruntime")


def _measures(shift: float = 0.0, uniform: bool = False):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 16, size=(8, 12))
    reference = 6.0 * np.eye(16)[np.roll(ids, -1, axis=1)] + rng.normal(size=(8, 12, 16))
    if uniform:
        reference = np.zeros_like(reference)
    candidate = reference + shift * rng.normal(size=reference.shape)
    reason = near_uniform(score_sequences(reference, ids))
    warning = f"WARNING: {reason} (rule vacuous-reference)" if reason else None
    return measure_tokens(reference, candidate, ids), warning


@pytest.mark.parametrize("promise,logits_db,cache_db,measures,outcome,rule", [
    ("float", 130.0, 140.0, _measures(), Outcome.OK, "budget-ppl-increase"),
    ("float", 40.0, 140.0, _measures(), Outcome.MISMATCH, "float-sqnr"),
    ("quantized", None, 12.0, _measures(0.3), Outcome.MISMATCH, "cache-consistency"),
    ("quantized", None, 60.0, _measures(3.0), Outcome.OVER_BUDGET, "budget-ppl-increase"),
    ("quantized", None, 60.0, _measures(0.05, uniform=True), Outcome.VACUOUS, "vacuous-reference"),
])
def test_each_decoder_verdict_names_its_rule(promise, logits_db, cache_db, measures, outcome, rule):
    """The decoder's halves go through the one verdict assembly (verify.assess -> against_both) as every task's."""
    tokens, warning = measures
    c = TokenComparison(tokens, logits_db, {"sqnr_db": cache_db, "positions": 8}, [8, 8], 8)
    verdict = assess(c, promise, reference_warning=warning).verdict
    assert (verdict.outcome, verdict.rule) == (outcome, rule), verdict.reason
    assert f"(rule {rule})" in verdict.reason


def test_continuation_match_counts_tokens_before_the_first_difference():
    assert continuation_match([[1, 2, 3, 4], [5, 6]], [[1, 2, 9, 4], [5, 6]]) == [2, 2]


def _mobilize(*argv) -> tuple[int, str, str]:
    import os
    import subprocess
    import sys

    exe = os.path.join(os.path.dirname(sys.executable), "mobilize")
    proc = subprocess.run([exe, *map(str, argv)], capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def tiny_lm_run(tmp_path_factory):
    """One compare of zoo:tiny_lm's ONNX Runtime files, shared by the tests that read its report and packages."""
    out = tmp_path_factory.mktemp("gen") / "gen"
    code, stdout, err = _mobilize("compare", "zoo:tiny_lm", "--variant", "onnx-fp32", "--variant", "onnx-int4",
                                  "--prompt-len", "8", "--gen-len", "8", "--rounds", "2", "--threads", "1", "-o", out)
    assert code == 0, err[-2000:]
    return out, stdout


def test_the_listed_schema_validates_a_real_decoder_report(tiny_lm_run, tmp_path):
    """#65 item 4: ``mobilize list schema``'s file, read by the jsonschema package alone, accepts the decoder report."""
    import jsonschema

    out, _ = tiny_lm_run
    code, _, err = _mobilize("list", "schema", "--json", tmp_path / "report.schema.json")
    assert code == 0, err
    schema = json.loads((tmp_path / "report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(json.loads((out / "report.json").read_text()))


def test_tiny_lm_decoder_files_judged_and_timed_in_tokens(tiny_lm_run):
    out, stdout = tiny_lm_run
    report = json.loads((out / "report.json").read_text())
    validate(report)  # the one schema, for every task
    facts = report["generation"]
    assert report["task"]["name"] == "generation" and facts["vocab_size"] == 4096 and "held-out" in facts["held_out"]
    assert report["unit"] == "token" and facts["bandwidth"]["gb_per_s"] > 0
    band = facts["bandwidth"]  # read after each of the 2 rounds (the bound beside them), the builds' reading kept
    assert len(band["samples"]) == 2 and band["gb_per_s"] == sum(band["samples"]) / 2, band
    assert band["before_rounds_gb_per_s"] > 0 and "one after each timed round" in stdout
    got = {v["name"]: v for v in report["variants"]}
    fp32, int4 = got["onnx-fp32"], got["onnx-int4"]
    assert fp32["outcome"] == "OK" and fp32["verdict"]["fidelity"]["rule"] == "float-sqnr"
    assert all(v["build_peak_rss_mb"] > 0 for v in (fp32, int4))  # each build's own process's peak
    assert fp32["tokens"]["top1_agreement"] > 0.99 and fp32["tokens"]["continuation_match_tokens"] == [8, 8, 8, 8]
    assert int4["outcome"] in ("OK", "OVER_BUDGET") and int4["tokens"]["weights"] == "int4"
    assert int4["size_bytes"] < fp32["size_bytes"] and int4["tokens"]["bytes_per_token"] < fp32["tokens"]["bytes_per_token"]
    shapes = facts["shapes"]  # zoo:tiny_lm ties its embedding to its head: the table is read once, as the head
    assert shapes["embedding_row"] == 0 and fp32["tokens"]["bytes_per_token"] < fp32["size_bytes"]
    for v in (fp32, int4):
        t = v["tokens"]
        assert t["decode_tokens_per_s"] > 0 and t["ttft_ms_p50"] > 0 and t["bytes_per_token"] > 0
        # residency measured (issue #63): the read over the file's working set against DRAM, not the reported cache
        at = band["at_size_gb_per_s"][str(t["bytes_per_token"])]
        dram = band["at_size_dram_gb_per_s"][str(t["bytes_per_token"])]  # read right after it: the same moment
        assert t["cache_resident"] == (at is not None and at >= 1.5 * dram), (t, band)
        assert "the whole buffer read right after it" in t["cache_rule"]
        assert t["cache_rule"].startswith("measured: its ") and "rule: >= 1.5x DRAM" in t["cache_rule"]
        assert (t["percent_of_bound"] is None) == t["cache_resident"]
        assert t["check_peak_rss_mb"] > 0 and v["latency_ms_p50"] == t["decode_ms_per_token_p50"]
        # the file's own memory (issue #63 item 4): a process with ONNX Runtime alone, not the checker's torch
        assert 0 < t["footprint_mb"] < t["footprint_peak_mb"] < t["check_peak_rss_mb"], t
        assert t["footprint_mb"] == round(t["footprint_peak_mb"] - t["baseline_mb"], 1)
        assert t["footprint_mb"] < 4 * v["size_bytes"] / 1e6 + 64  # the file, its cache and the session's buffers
        assert any(n.startswith("TTFT: ") for n in v["notes"])
    assert report["recommended"]["name"] in got and "decode time per token" in report["recommended"]["reason"]
    assert "tok/s" in stdout and "recommended" in stdout
    assert "<table" in (out / "report.html").read_text()


def test_a_saved_random_decoder_folder_is_vacuous_not_ok(run_cli_process, tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=256)).save_pretrained(tmp_path / "lm")
    out = tmp_path / "gen"
    code, stdout, err = run_cli_process("compare", tmp_path / "lm", "--variant", "eager-fp32", "--prompt-len", "8",
                                        "--gen-len", "4", "--rounds", "2", "-o", out)
    assert code == 0, err[-2000:]
    [v] = json.loads((out / "report.json").read_text())["variants"]
    assert v["outcome"] == "VACUOUS" and v["verdict"]["rule"] == "vacuous-reference"
    assert v["verdict"]["fidelity"]["outcome"] == "OK"  # the file is faithful; the reference proves nothing
    assert "no tokenizer.json" in " ".join(json.loads((out / "report.json").read_text())["generation"]["notes"])


@pytest.mark.parametrize("argv,fragments", [
    (["zoo:tiny_lm", "--plan", "quick"], ["a causal LM runs the generation plan"]),
    (["zoo:tiny_lm", "--variant", "onnx-in4"], ["unknown decoder variant 'onnx-in4'", "did you mean: onnx-int4"]),
    (["zoo:tiny_lm", "--gen-len", "0"], ["--gen-len must be at least 1"]),
])
def test_generation_refusals_are_one_line(run_cli, tmp_path, argv, fragments):
    code, _, err = run_cli("compare", *argv, "-o", tmp_path / "o")
    assert_one_line_error(code, err, *fragments)


def test_optimize_builds_one_decoder_file_and_judges_it(run_cli_process, tmp_path):
    out = tmp_path / "opt"
    code, stdout, err = run_cli_process("optimize", "zoo:tiny_lm", "--recipe", "onnx-int4", "--json", tmp_path / "o.json",
                                        "-o", out)
    assert code == 0, err[-2000:]
    [line] = [ln for ln in stdout.splitlines() if ln.startswith(str(out))]
    assert "model-int4" in line and "onnxruntime int4  OK: " in line and "perplexity" in line
    assert "(rule budget-ppl-increase)" in line
    [v] = json.loads((tmp_path / "o.json").read_text())["variants"]
    assert v["outcome"] == "OK" and v["tokens"]["decode_tokens_per_s"] is None  # built and judged, not timed
    assert (out / "artifacts" / "onnx-int4").is_dir()


def test_optimize_refuses_a_recipe_that_is_no_decoder_variant(run_cli, tmp_path):
    code, _, err = run_cli("optimize", "zoo:tiny_lm", "--recipe", "seed", "-o", tmp_path / "o")
    assert_one_line_error(code, err, "unknown decoder variant 'seed'")


def test_each_file_is_a_package_that_generates_the_float_models_text(tiny_lm_run):
    """The package beside each file (tokenizer, configs, mobilize.json) runs with `mobilize generate`: greedy on the
    fp32 file is the float model's own continuation (decoded without a cache); the int4 file prints text too."""
    from mobilize.bench.decoding import FullForward, greedy
    from mobilize.zoo import ZOO, tiny_lm

    out, _ = tiny_lm_run
    prompt = "import os\n\n\ndef "
    for name in ("onnx-fp32", "onnx-int4"):
        folder = out / "artifacts" / name
        assert {"tokenizer.json", "config.json", "generation_config.json", "mobilize.json"} <= \
            {p.name for p in folder.iterdir()}
        code, stdout, err = _mobilize("generate", folder, "--prompt", prompt, "--max-new-tokens", "12", "--threads", "1")
        assert code == 0 and stdout.startswith(prompt) and len(stdout) > len(prompt) + 4, err[-2000:]
        assert "time to first token" in err and "tokens/s" in err
        if name == "onnx-fp32":
            tokenizer = tiny_lm.load_tokenizer()
            want = greedy(FullForward(ZOO.get("tiny_lm").build().lm, 64), tokenizer.encode(prompt).ids, 12)
            assert stdout.rstrip("\n") == prompt + tokenizer.decode(want)


def test_sampling_is_reproducible_with_its_seed_and_stops_at_the_end_token(tiny_lm_run):
    import mobilize

    folder = tiny_lm_run[0] / "artifacts" / "onnx-int4"
    runs = [mobilize.generate(folder, "class ", max_new_tokens=16, temperature=1.0, top_p=0.95, seed=s, threads=1)
            for s in (7, 7, 8)]
    assert runs[0].token_ids == runs[1].token_ids and runs[0].text == runs[1].text
    assert runs[0].token_ids != runs[2].token_ids
    assert all(r.stopped in ("eos", "length") and (r.stopped == "eos") == (r.token_ids[-1] == 0) for r in runs)


@pytest.mark.parametrize("argv,fragments", [
    (["no/such/folder", "--prompt", "x"], ["no/such/folder does not exist"]),
    (["{out}", "--prompt", "x"], ["is no decoder package"]),
    (["{pkg}", "--prompt", "x", "--temperature", "-1"], ["--temperature must be 0"]),
    (["{pkg}", "--prompt", "x", "--chat"], ["has no chat template"]),
])
def test_generate_refusals_are_one_line(tiny_lm_run, run_cli, argv, fragments):
    out = tiny_lm_run[0]
    argv = [a.format(out=out, pkg=out / "artifacts" / "onnx-fp32") for a in argv]
    code, _, err = run_cli("generate", *argv)
    assert_one_line_error(code, err, *fragments)


def test_compare_measures_perplexity_on_the_users_text_and_says_so(run_cli_process, tmp_path):
    import inspect
    import json as json_module

    text = tmp_path / "mine.txt"
    text.write_text(inspect.getsource(json_module) * 2)
    out = tmp_path / "o"
    code, _, err = run_cli_process("compare", "zoo:tiny_lm", "--variant", "eager-fp32", "--data", text, "--eval-len",
                                   "64", "--prompt-len", "8", "--gen-len", "4", "--rounds", "1", "--time-budget", "1",
                                   "-o", out)
    assert code == 0, err[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert "of your text" in report["generation"]["held_out"] and str(text) in report["generation"]["held_out"]
    assert report["generation"]["eval_tokens"] == 64


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llamacpp-q4_k_m", "onnx-genai-int4-mixed"])
def test_the_peers_files_are_packages_that_optimize_builds_and_generate_runs(run_cli_process, tmp_path, name):
    """The files the peers' own tools build (llama.cpp's GGUF, onnxruntime-genai's model folder) are built and
    judged by optimize like mobilize's own, and run by generate from their package."""
    from mobilize.generation.plan import generation_variants, unavailable

    why = unavailable(generation_variants([name])[0])
    if why:
        pytest.skip(f"{name}: {why}")
    out = tmp_path / "opt"
    code, stdout, err = run_cli_process("optimize", "zoo:tiny_lm", "--recipe", name, "-o", out)
    assert code == 0 and "(rule budget-ppl-increase)" in stdout, err[-2000:]
    prompt = "import os\n\n\ndef "
    code, stdout, err = _mobilize("generate", out / "artifacts" / name, "--prompt", prompt, "--max-new-tokens", "12",
                                  "--threads", "1")
    assert code == 0 and stdout.startswith(prompt) and len(stdout) > len(prompt) + 4, err[-2000:]
    assert f"({name}, " in err and "tokens/s" in err


class _Rounding:
    """zoo:tiny_lm through FullForward as a quantized file: each position's logits off by a fixed error (the file's
    weights, ``common`` times the row's spread: the same in a step and a prefill) and a call's own (``path``: a
    kernel rounding a step and a prefill differently); when ``forget``, a decode step sees only its own token (a
    broken cache)."""

    def __init__(self, lm, common: float, path: float, forget: bool = False):
        from mobilize.bench.decoding import FullForward

        self.inner, self.common, self.path, self.forget = FullForward(lm, 64), common, path, forget
        self.rng, self.position = np.random.default_rng(1), 0

    def _round(self, logits, first: int):
        logits = np.asarray(logits, dtype=np.float64)
        rows = logits.reshape(-1, logits.shape[-1])
        weights = np.stack([np.random.default_rng(100 + first + k).normal(size=rows.shape[-1])
                            for k in range(len(rows))])
        noise = self.common * weights + self.path * self.rng.normal(size=rows.shape)
        return (rows + rows.std(-1, keepdims=True) * noise).reshape(logits.shape)

    def prefill(self, ids):
        self.position = len(ids)
        return self._round(self.inner.prefill(ids), 0)

    def decode(self, token):
        self.position += 1
        out = self.inner.prefill([token])[-1] if self.forget else self.inner.decode(token)
        return self._round(out, self.position - 1)


@pytest.mark.parametrize("common,path,forget,outcome,floor", [
    (0.0, 0.0, False, Outcome.OK, "30 dB"),
    (0.08, 0.05, False, Outcome.OK, "3 dB under the file's own"),  # 23.9 dB from the float model, steps 26.4 dB
    (0.2, 0.05, False, Outcome.OK, "the least the policy takes, 20 dB"),  # the random 1B case: 17.1 dB and 26.4 dB
    (0.0, 0.0, True, Outcome.MISMATCH, "30 dB"),  # steps 9.6 dB
    (0.2, 0.05, True, Outcome.MISMATCH, "the least the policy takes, 20 dB"),
])
def test_cache_consistency_tells_a_broken_cache_from_the_files_own_rounding(common, path, forget, outcome, floor):
    from mobilize.accuracy.decoder_verdict import judge_decoder_fidelity
    from mobilize.accuracy.verify import Policy
    from mobilize.bench.decoding import FullForward
    from mobilize.compare.decoder_worker import cache_check
    from mobilize.zoo import ZOO

    lm = ZOO.get("tiny_lm").build().lm
    ids = [0, *range(300, 331)]
    cache = cache_check(_Rounding(lm, common, path, forget), ids, FullForward(lm, 64).prefill(ids))
    verdict = judge_decoder_fidelity(TokenComparison(_measures()[0], None, cache, [8], 8), "quantized", Policy())
    assert (verdict.outcome, verdict.rule) == (outcome, "cache-consistency"), (cache, verdict.reason)
    assert floor in verdict.reason or (outcome == Outcome.OK and floor == "30 dB"), verdict.reason
    if path and not forget:
        assert cache["sqnr_db"] < Policy().reduced_min_sqnr_db, cache  # under the fixed floor: its rounding passed it


def test_a_large_model_gets_the_float_reference_and_one_int4_file_per_engine(run_cli, tiny_llama, tmp_path,
                                                                              monkeypatch):
    """Issue #63 item 1: from LARGE_PARAMETERS (read from the folder's safetensors headers, no weight loaded) compare's
    default is the large plan, said in a note; --plan generation asks for every file.  The threshold and the plan are
    shrunk here to the tiny model and two fast files: what is tested is the choice and what the report says."""
    import mobilize.generation.plan as plan
    from mobilize.lowering.causal_lm import saved_parameters

    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama)
    assert saved_parameters(tiny_llama) == sum(p.numel() for p in model.parameters())
    monkeypatch.setattr(plan, "LARGE_PARAMETERS", saved_parameters(tiny_llama))
    monkeypatch.setattr(plan, "LARGE_PLAN", ("eager-fp32", "onnx-fp32"))
    out = tmp_path / "o"
    code, stdout, err = run_cli("compare", tiny_llama, "--prompt-len", "8", "--gen-len", "4", "--eval-len", "16",
                                "--rounds", "1", "--time-budget", "1", "-o", out)
    assert code == 0, err[-2000:]
    report = json.loads((out / "report.json").read_text())
    validate(report)
    assert report["plan"] == "generation-large" and [v["name"] for v in report["variants"]] == ["eager-fp32",
                                                                                                "onnx-fp32"]
    assert any("the float reference and one int4 file per engine" in n and "--plan generation builds all" in n
               for n in report["notes"]), report["notes"]
    assert plan.default_names(saved_parameters(tiny_llama), "generation") == ([], [])
    # asked for by name, on any model: accepted (refused here only for the bad number checked after the plan)
    code, _, err = run_cli("compare", tiny_llama, "--plan", "generation-large", "--rounds", "0", "-o", tmp_path / "p")
    assert code == 2 and "--rounds" in err and "generation plan" not in err, err
    assert plan.default_names(1, "generation-large")[0] == list(plan.LARGE_PLAN)
