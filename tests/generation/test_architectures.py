"""Any causal LM transformers' AutoModelForCausalLM loads is a decoder (issue #46 item 1): small saved GPT-2, Qwen2,
Phi3, Mistral (sliding window), Gemma 2 (soft-capping, sliding window) and Gemma 3 configs are recognised from
their folder, every engine builds each or refuses it in one line (UNSUPPORTED, naming what it takes), and the
fp32 files reproduce the model - past the sliding window too.  A folder that is not a causal LM is refused in one
line, with the reason, before anything is built.

Default suite (OPT, GPT-NeoX and Llama with GQA and rope scaling too): the detection, the refusals and one
in-process case per architecture (eager and OpenVINO fp32 files against the model, a few seconds each).  ``slow``: ``mobilize compare FOLDER --task generation`` on each
architecture trained a few hundred steps on Python source (so its reference is no uniform guess), every fp32
file's greedy continuations equal to the model's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import assert_one_line_error

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

VOCAB = 192
WINDOW = 8
"""The sliding window of the Mistral and Gemma configs: shorter than every sequence checked, so it bites."""
POSITIONS = 128
SPECIAL = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": POSITIONS, "vocab_size": VOCAB, **SPECIAL}


def configs() -> dict[str, Any]:
    """One small config per architecture (hidden 64, 2 layers, vocab 192; Llama with GQA and linear rope scaling)."""
    t = transformers
    gemma = dict(SMALL, head_dim=16, sliding_window=WINDOW)
    return {
        "gpt2": t.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=POSITIONS, **SPECIAL),
        "qwen2": t.Qwen2Config(**SMALL),
        "phi3": t.Phi3Config(**SMALL),
        "mistral": t.MistralConfig(**SMALL, sliding_window=WINDOW),
        "gemma2": t.Gemma2Config(**gemma, attn_logit_softcapping=10.0, final_logit_softcapping=10.0),
        "gemma3": t.Gemma3TextConfig(**gemma),
        "opt": t.OPTConfig(vocab_size=VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                           max_position_embeddings=POSITIONS, word_embed_proj_dim=64, **SPECIAL),
        "gpt_neox": t.GPTNeoXConfig(**{k: v for k, v in SMALL.items() if k != "num_key_value_heads"}),
        "llama": t.LlamaConfig(**SMALL, rope_scaling={"rope_type": "linear", "factor": 2.0}),
    }


ARCHITECTURES = list(configs())


def save_random(name: str, folder: Path) -> Path:
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(configs()[name]).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def random_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("arch")
    return {name: save_random(name, root / name) for name in ARCHITECTURES}


# -- detection and refusals -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ARCHITECTURES)
def test_every_architecture_is_recognised_from_its_folder(name, random_folders):
    from mobilize.generation.detect import wants_generation
    from mobilize.generation.model import causal_lm
    from mobilize.sources.reference import ModelRef

    ref = ModelRef.parse(str(random_folders[name]))
    assert wants_generation(None, ref)  # without --task: GPT2LMHeadModel is one, not only *ForCausalLM
    assert type(causal_lm(ref)).__name__ == json.loads((random_folders[name] / "config.json").read_text())[
        "architectures"][0]


def _not_causal(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    t = transformers
    torch.manual_seed(0)
    t.BertModel(t.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                             intermediate_size=64)).save_pretrained(tmp_path / "bert")
    t.T5ForConditionalGeneration(t.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=1,
                                            num_heads=4)).save_pretrained(tmp_path / "t5")
    (tmp_path / "unknown").mkdir()
    (tmp_path / "unknown" / "config.json").write_text('{"model_type": "frobnik", "architectures": ["FrobLM"]}')
    return {"bert": (tmp_path / "bert", "names BertModel, which is not a causal LM"),
            "t5": (tmp_path / "t5", "T5ForConditionalGeneration is an encoder-decoder"),
            "unknown": (tmp_path / "unknown", "does not know model_type 'frobnik'")}


@pytest.mark.parametrize("command", [["compare"], ["compare", "--task", "generation"], ["bench", "--task", "generation"],
                                     ["lint"]])
def test_a_folder_that_is_no_causal_lm_is_refused_in_one_line(run_cli, tmp_path, command):
    """Refused from its config.json before anything loads (a BertModel was loaded as BertLMHeadModel with an
    untrained head and timed, exit 0; outside the generation task - lint - it still was)."""
    for folder, fragment in _not_causal(tmp_path).values():
        out = ["-o", tmp_path / "o"] if command[0] == "compare" else []
        code, _, err = run_cli(command[0], folder, *command[1:], *out)
        assert_one_line_error(code, err, fragment)
        assert not (tmp_path / "o" / "artifacts").exists()


def test_weights_missing_or_unreadable_are_refused_with_the_reason(random_folders, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from mobilize.core.errors import UnsupportedModelError
    from mobilize.lowering.causal_lm import load_causal_lm

    cases = {}
    for case in ("none", "truncated", "headless"):
        cases[case] = shutil.copytree(random_folders["qwen2"], tmp_path / case)
    weights = cases["none"] / "model.safetensors"
    weights.unlink()
    data = (random_folders["qwen2"] / "model.safetensors").read_bytes()
    (cases["truncated"] / "model.safetensors").write_bytes(data[:len(data) // 2])
    state = load_file(random_folders["qwen2"] / "model.safetensors")
    state.pop("lm_head.weight")
    state["score.weight"] = torch.zeros(2, 64)
    save_file(state, cases["headless"] / "model.safetensors", metadata={"format": "pt"})
    expect = {"none": "holds no weights", "truncated": "its weights cannot be loaded",
              "headless": "1 weight(s) missing from its files (lm_head.weight); 1 weight(s) in its files the model "
                          "has no place for (score.weight)"}
    for case, fragment in expect.items():
        with pytest.raises(UnsupportedModelError, match=None) as info:
            load_causal_lm(cases[case])
        assert fragment in str(info.value) and "\n" not in str(info.value) and "\x1b" not in str(info.value)


def test_the_reference_refuses_a_headless_folder_before_any_build(run_cli_process, random_folders, tmp_path):
    """transformers' load report (ANSI colours, a table of keys) stays off the terminal: one line says it."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(random_folders["gpt2"], tmp_path / "gpt2")
    state = load_file(folder / "model.safetensors")
    state.pop("transformer.h.1.mlp.c_proj.weight")
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    code, _, err = run_cli_process("compare", folder, "--variant", "onnx-fp32", "-o", tmp_path / "o")
    lines = [ln for ln in err.splitlines() if ln.startswith("mobilize: error:")]
    assert code == 2 and len(lines) == 1 and "\x1b" not in err and "LOAD REPORT" not in err, err[-2000:]
    assert "missing from its files (transformer.h.1.mlp.c_proj.weight)" in lines[0]
    assert not (tmp_path / "o" / "artifacts" / "onnx-fp32").exists()


@pytest.mark.parametrize("name,variant,fragment", [
    ("gpt2", "litert-fp32", "the LiteRT decoder converts Llama, Mistral and Qwen2"),
    ("phi3", "litert-int4", "this model is Phi3ForCausalLM (model_type phi3)"),
    ("mistral", "litert-fp32", f"this MistralForCausalLM has sliding_window={WINDOW}"),
    ("mistral", "executorch-fp32", f"this model has sliding_window={WINDOW}"),
    ("gemma2", "executorch-8da4w", "attn_logit_softcapping=10.0"),
])
def test_an_engine_that_cannot_take_an_architecture_says_which_it_takes(name, variant, fragment, random_folders,
                                                                         tmp_path):
    from mobilize.core.errors import UnsupportedByEngineError
    from mobilize.core.outcome import Outcome
    from mobilize.generation.plan import generation_variants, unavailable

    [v] = generation_variants([variant])
    if unavailable(v):
        pytest.skip(f"{variant}: {unavailable(v)}")
    with pytest.raises(UnsupportedByEngineError) as info:
        v.build_file(random_folders[name], tmp_path)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert Outcome.for_error("export", info.value) == Outcome.UNSUPPORTED


def test_compare_reports_an_engines_refusal_as_unsupported(run_cli_process, random_folders, tmp_path):
    """The build worker's refusal reaches report.json as UNSUPPORTED (stage export), its note one line naming what
    the engine takes - not EXPORT_FAIL, which reads as a crash."""
    from mobilize.generation.plan import generation_variants, unavailable
    from mobilize.report.json_report import validate

    if unavailable(generation_variants(["litert-fp32"])[0]):
        pytest.skip("litert-fp32 cannot run here")
    out = tmp_path / "o"
    code, _, err = run_cli_process("compare", random_folders["gpt2"], "--variant", "litert-fp32", "--prompt-len", "8",
                                   "--gen-len", "4", "--eval-len", "16", "--rounds", "1", "--time-budget", "1", "-o",
                                   out)
    assert code == 0, err[-2000:]
    report = json.loads((out / "report.json").read_text())
    validate(report)
    [v] = report["variants"]
    assert (v["outcome"], v["stage"]) == ("UNSUPPORTED", "export")
    [note] = v["notes"]
    assert "converts Llama, Mistral and Qwen2" in note and "GPT2LMHeadModel" in note and "\n" not in note


@pytest.mark.parametrize("variant", ["llamacpp-q8_0", "onnx-genai-int4"])
def test_a_sliding_window_the_tool_would_drop_is_refused_before_any_build(variant, random_folders, tmp_path):
    """llama.cpp's converter and onnxruntime-genai's builder build a Mistral's attention as full causal attention:
    its window of 8 dropped (14.5 dB from the model at 12 tokens, then GroupQueryAttention's raw error at 40).  Both
    refuse it in one line, naming the window, before the tool runs (issue #63 item 5)."""
    import shutil

    from mobilize.core.errors import UnsupportedByEngineError
    from mobilize.generation.plan import generation_variants, unavailable
    from tests.decoder_files import save_byte_tokenizer

    [v] = generation_variants([variant])
    if unavailable(v):
        pytest.skip(f"{variant}: {unavailable(v)}")
    folder = tmp_path / "mistral"
    shutil.copytree(random_folders["mistral"], folder)
    save_byte_tokenizer(folder, VOCAB, SPECIAL["eos_token_id"])
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UnsupportedByEngineError) as info:
        v.build_file(folder, out)
    said = str(info.value)
    assert f"sliding_window={WINDOW}" in said and "model_type mistral" in said and "\n" not in said
    assert not any(out.iterdir())  # nothing was built


def test_gpt2_builds_with_llama_cpp_and_the_builder_refuses_it_by_class(random_folders, tmp_path):
    """transformers' GPT2Config writes its context as n_positions, llama.cpp's GPT-2 converter read n_ctx (its
    refusal was a raw ``KeyError: 'n_ctx'``): the file now builds and answers as the model does.  The builder's own
    refusal named the temporary folder; it names the class."""
    import shutil

    from mobilize.accuracy.metrics import sqnr_db
    from mobilize.core.errors import UnsupportedByEngineError
    from mobilize.generation.plan import generation_variants, unavailable
    from tests.decoder_files import save_byte_tokenizer

    folder = tmp_path / "gpt2"
    shutil.copytree(random_folders["gpt2"], folder)
    save_byte_tokenizer(folder, VOCAB, SPECIAL["eos_token_id"])
    llama, genai = generation_variants(["llamacpp-f16", "onnx-genai-fp32"])
    if unavailable(llama) is None:
        session = llama.load(llama.build_file(folder, tmp_path / "gguf"), 1, 32)
        ids = [int(t) for t in np.random.default_rng(1).integers(3, 120, 20)]
        try:
            got = np.asarray(session.prefill(ids), dtype=np.float64)
        finally:
            session.close()
        model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
        with torch.no_grad():
            want = model(input_ids=torch.tensor([ids])).logits[0].double().numpy()
        assert sqnr_db(want, got) > 40  # fp16 weights: 67 dB on this model
    if unavailable(genai) is None:
        with pytest.raises(UnsupportedByEngineError) as info:
            genai.build_file(folder, tmp_path / "genai")
        said = str(info.value)
        assert "GPT2LMHeadModel model is not currently supported" in said and str(folder) not in said


# -- one fast case per architecture ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ARCHITECTURES)
@pytest.mark.parametrize("variant", ["eager-fp32", "openvino-fp32"])
def test_fp32_files_reproduce_each_architecture_past_its_window(name, variant, random_folders, tmp_path):
    """Prefill and cached decode steps against the model's own full forward, over 40 tokens: five times the
    sliding window (a sliding layer's cache once dropped positions by their count in the traced file)."""
    from mobilize.generation.plan import generation_variants, unavailable
    from mobilize.lowering.decoder import load_hf_decoder
    from tests.decoder_files import close

    [v] = generation_variants([variant])
    if unavailable(v):
        pytest.skip(f"{variant}: {unavailable(v)}")
    ids = [int(t) for t in np.random.default_rng(1).integers(3, VOCAB, 40)]
    with torch.no_grad():
        want = load_hf_decoder(random_folders[name])(input_ids=torch.tensor([ids])).logits[0].numpy()
    session = v.load(v.build_file(random_folders[name], tmp_path), 1, 64)
    try:
        got = np.concatenate([session.prefill(ids[:12]), np.stack([session.decode(t) for t in ids[12:]])])
    finally:
        session.close()
    assert close(got, want), float(np.abs(got - want).max())


# -- compare on trained models (slow) ----------------------------------------------------------------------------

TRAIN_MODULES = ("textwrap", "string", "json.encoder", "json.decoder", "json.scanner", "shlex")
"""Python source the models learn; the perplexity is measured on the first (``--data``): a model this small
trained this briefly predicts its own text well (perplexity 8-17 of 192), unseen text barely (70-90)."""
STEPS = 300


def _source(module: str) -> str:
    import importlib
    import inspect

    return inspect.getsource(importlib.import_module(module))


def _tokenizer(text: str) -> Any:
    """A character BPE of ``VOCAB`` tokens learnt on ``text`` (ids 0-2 are the special tokens)."""
    from tokenizers import Tokenizer, decoders, models, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.decoder = decoders.BPEDecoder()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
                                  show_progress=False)
    tokenizer.train_from_iterator(text.splitlines(keepends=True), trainer)
    return tokenizer


def train(name: str, folder: Path, ids: Any, tokenizer: Any) -> None:
    """``STEPS`` AdamW steps on random 64-token windows of ``ids`` (seeded), saved with its tokenizer."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(configs()[name]).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(STEPS):
        starts = torch.randint(0, len(ids) - 65, (16,), generator=generator)
        batch = torch.stack([ids[s:s + 64] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval().save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[dict[str, Path], Path]:
    """Each architecture trained on the same Python source, and the text measured (a .txt for ``--data``)."""
    root = tmp_path_factory.mktemp("trained")
    text = "".join(_source(m) for m in TRAIN_MODULES)
    tokenizer = _tokenizer(text)
    ids = torch.tensor(tokenizer.encode(text).ids, dtype=torch.long)
    measured = root / "measured.txt"
    measured.write_text(_source(TRAIN_MODULES[0]))
    torch.set_num_threads(1)
    folders = {}
    for name in SWEEP:
        folders[name] = root / name
        train(name, folders[name], ids, tokenizer)
    return folders, measured


SWEEP = {
    "gpt2": ["eager-fp32", "onnx-fp32", "executorch-8da4w", "litert-fp32"],
    "qwen2": ["eager-fp32", "onnx-fp32", "litert-fp32", "litert-int4", "openvino-int4", "onnx-genai-int4",
              "llamacpp-q4_k_m"],
    "phi3": ["eager-fp32", "onnx-fp32", "executorch-fp32", "openvino-int8", "onnx-genai-fp32"],
    "mistral": ["eager-fp32", "onnx-fp32", "openvino-fp32", "executorch-fp32", "litert-fp32"],
    "gemma2": ["eager-fp32", "onnx-fp32", "onnx-int4", "eager-int8wo", "executorch-8da4w"],
    "gemma3": ["eager-fp32", "onnx-fp32", "openvino-fp32"],
}
"""Per architecture, the variants compared: onnx-fp32 and eager-fp32 on each, an int4 or int8 file of every engine
somewhere, and the refusals (LiteRT: Llama, Mistral and Qwen2 only, no sliding window; ExecuTorch: no sliding
window, no soft-capping)."""
REFUSED = {("gpt2", "litert-fp32"), ("mistral", "executorch-fp32"), ("mistral", "litert-fp32"),
           ("gemma2", "executorch-8da4w"),
           ("qwen2", "llamacpp-q4_k_m"),  # a character BPE: llama.cpp's converter takes byte-level or SentencePiece
           ("phi3", "onnx-genai-fp32")}  # the builder fails on this small Phi3 (KeyError 'multi_cache')


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SWEEP))
def test_compare_builds_or_refuses_every_architecture(name, trained, run_cli_process, tmp_path):
    from mobilize.generation.plan import generation_variants, unavailable
    from mobilize.report.json_report import validate

    folders, measured = trained
    names = [n for n in SWEEP[name] if not unavailable(generation_variants([n])[0])]
    out = tmp_path / "o"
    code, stdout, err = run_cli_process("compare", folders[name], "--task", "generation",
                                        *[a for n in names for a in ("--variant", n)], "--data", measured,
                                        "--prompt-len", "8", "--gen-len", "8", "--eval-len", "32", "--rounds", "2",
                                        "--time-budget", "1", "--threads", "1", "-o", out)
    assert code == 0, err[-3000:]
    report = json.loads((out / "report.json").read_text())
    validate(report)
    assert report["reference_warning"] is None, report["reference_warning"]  # trained: no uniform guess
    got = {v["name"]: v for v in report["variants"]}
    assert set(got) == set(names)
    for variant, v in got.items():
        if (name, variant) in REFUSED:
            [note] = [n for n in v["notes"] if n.startswith("UNSUPPORTED")]
            assert v["outcome"] == "UNSUPPORTED" and "\n" not in note and "\x1b" not in note, v
            continue
        t = v["tokens"]
        if v["tokens"]["weights"] == "fp32":
            assert v["outcome"] == "OK", (variant, v["outcome"], v["notes"])
            assert t["continuation_match_tokens"] == [t["continuation_tokens"]] * len(t["continuation_match_tokens"])
        else:
            assert v["outcome"] in ("OK", "OVER_BUDGET"), (variant, v["outcome"], v["notes"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ARCHITECTURES)
@pytest.mark.parametrize("variant", ["llamacpp-q8_0", "onnx-genai-fp32"])
def test_the_peers_tools_build_each_architecture_or_refuse_in_one_line(name, variant, random_folders, tmp_path):
    """llama.cpp's converter and onnxruntime-genai's builder on every architecture (with a byte-level tokenizer
    beside it): a file that runs, or UnsupportedByEngineError in one line with the tool's own reason."""
    import shutil

    from mobilize.core.errors import UnsupportedByEngineError
    from mobilize.generation.plan import generation_variants, unavailable
    from tests.decoder_files import save_byte_tokenizer

    [v] = generation_variants([variant])
    if unavailable(v):
        pytest.skip(f"{variant}: {unavailable(v)}")
    folder = tmp_path / name
    shutil.copytree(random_folders[name], folder)
    # as many ids as the model has (Gemma's converter cuts its table to them), its end token the model's
    save_byte_tokenizer(folder, VOCAB, SPECIAL["eos_token_id"])
    try:
        path = v.build_file(folder, tmp_path / "out")
    except UnsupportedByEngineError as refused:
        assert "\n" not in str(refused) and "\x1b" not in str(refused), str(refused)
        return
    ids = [int(t) for t in np.random.default_rng(1).integers(3, 120, 20)]
    session = v.load(path, 1, 32)
    try:
        logits = session.prefill(ids[:12])
        steps = np.stack([session.decode(t) for t in ids[12:]])
    finally:
        session.close()
    assert np.isfinite(logits).all() and np.isfinite(steps).all() and steps.shape[-1] >= 120
