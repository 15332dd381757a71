"""The llama.cpp decoder variants beyond the contract every decoder meets (tests/contract/test_decoders.py): the
zoo model's folder taken by llama.cpp's own converter, libllama tokenizing text exactly as the model's tokenizer
does, the tensor types each file really stores (the K-quant fallbacks named), the bytes a token reads, and the
refusals: a folder with no tokenizer, a file that is not GGUF, llama.cpp not installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

from mobilize.backends.llamacpp import convert as conversion  # noqa: E402
from mobilize.backends.llamacpp.decoder import Q4_K_M, LlamaCppSession, bytes_read, describe  # noqa: E402
from mobilize.core.errors import UnsupportedByEngineError, UnsupportedModelError  # noqa: E402

needs_llamacpp = pytest.mark.skipif(conversion.available() is not None, reason=f"{conversion.available()}")


@pytest.fixture(scope="module")
def zoo_q4_k_m(tmp_path_factory):
    """The zoo decoder's own folder (as shipped) made into a Q4_K_M GGUF."""
    if conversion.available():
        pytest.skip(conversion.available())
    from mobilize.zoo import tiny_lm

    return Q4_K_M.build_file(tiny_lm.WEIGHTS_DIR, tmp_path_factory.mktemp("zoo-gguf"))


@needs_llamacpp
def test_libllama_tokenizes_text_as_the_models_tokenizer_does(zoo_q4_k_m):
    """The converter was told ``gpt-2`` for the zoo's own byte-level BPE (its hash is unknown to llama.cpp): the
    ids libllama gives real held-out source must be the tokenizer's own, or the file would read other text."""
    import llama_cpp

    from mobilize.zoo import tiny_lm

    session = LlamaCppSession(zoo_q4_k_m, 1, 64)
    try:
        vocab = llama_cpp.llama_model_get_vocab(session.model)
        tokenizer = tiny_lm.load_tokenizer()
        for path in tiny_lm.corpus_files("held-out")[:3]:
            data = tiny_lm.read_source(path)[:3000].encode()
            buffer = (llama_cpp.llama_token * len(data))()
            n = llama_cpp.llama_tokenize(vocab, data, len(data), buffer, len(data), False, True)
            assert list(buffer[:n]) == tokenizer.encode(data.decode()).ids, path
    finally:
        session.close()


@needs_llamacpp
def test_an_amx_build_of_libllama_loads_files_without_its_extra_buffer_types(zoo_q4_k_m, monkeypatch):
    """Issue #62: ggml's AMX buffer type (first among libllama's extra buffer types) crashed every quantized GGUF on
    an Intel Xeon with AMX.  A libllama that says it was built with AMX loads each file with ``use_extra_bufts``
    off, and says so; the tokens are those of the default load (the same file, the plain CPU buffers)."""
    import numpy as np

    from mobilize.backends.llamacpp import decoder

    prompt = [1, 17, 42, 7, 99, 3]
    default = LlamaCppSession(zoo_q4_k_m, 1, 16)
    try:
        assert not any("AMX" in n for n in default.notes), default.notes
        want = np.asarray(default.prefill(prompt))
    finally:
        default.close()
    seen = []
    monkeypatch.setattr(decoder, "amx_compiled", lambda info: seen.append(info) or True)
    plain = LlamaCppSession(zoo_q4_k_m, 1, 16)
    try:
        got = np.asarray(plain.prefill(prompt))
    finally:
        plain.close()
    assert seen and "CPU :" in seen[0], seen  # what libllama itself says it was built with
    assert decoder.AMX_NOTE in plain.notes, plain.notes
    tolerance = 0.05 * np.abs(want).max()  # two kernel paths for the same weights: float rounding apart
    assert np.abs(got - want).max() < tolerance
    top2 = np.sort(want, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * tolerance  # a near tie may flip between kernels: not a difference
    assert (got.argmax(-1) == want.argmax(-1))[clear].all()


@needs_llamacpp
def test_the_file_says_what_each_tensor_is_stored_as(zoo_q4_k_m):
    line = describe(zoo_q4_k_m)
    # 4 layers x 7 matrices + the tied embedding; ffn_down's rows (704) are not a multiple of 256
    assert "29 weight matrices" in line and "Q4_K" in line and "Q6_K" in line
    assert "rows of 704 are not a multiple of 256, so those 4 are stored as" in line


@needs_llamacpp
def test_bytes_read_per_token_counts_a_tied_table_once_and_never_more_than_the_file(zoo_q4_k_m):
    from gguf import GGUFReader

    tensors = {t.name: t for t in GGUFReader(str(zoo_q4_k_m)).tensors}
    assert "output.weight" not in tensors  # tied: the head is the embedding table
    read = bytes_read(zoo_q4_k_m)
    assert read == sum(int(t.n_bytes) for t in tensors.values()) < zoo_q4_k_m.stat().st_size


@needs_llamacpp
def test_a_folder_without_a_tokenizer_is_refused_in_one_line(tiny_llama, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(tiny_llama, bare)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bare / name).unlink()
    with pytest.raises(UnsupportedByEngineError, match="needs the model's tokenizer") as refused:
        Q4_K_M.build_file(bare, tmp_path / "out")
    assert "\n" not in str(refused.value)


@needs_llamacpp
def test_an_architecture_the_converter_does_not_know_is_its_own_one_line_reason(tiny_llama, tmp_path):
    odd = tmp_path / "odd"
    shutil.copytree(tiny_llama, odd)
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "architectures": ["NoSuchModelForCausalLM"]}))
    with pytest.raises(UnsupportedByEngineError, match="llama.cpp's converter cannot take this model: .*"
                                                       "NoSuchModelForCausalLM") as refused:
        Q4_K_M.build_file(odd, tmp_path / "out")
    assert "\n" not in str(refused.value)


@needs_llamacpp
@pytest.mark.parametrize("content", [b"", b"GGUF", b"not a gguf file at all" * 10])
def test_a_file_that_is_not_gguf_is_refused_not_a_crash(tmp_path, content):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    with pytest.raises(UnsupportedModelError, match="GGUF|libllama could not load"):
        LlamaCppSession(bad, 1, 16)


@needs_llamacpp
def test_bench_times_a_gguf_and_refuses_a_garbage_one(zoo_q4_k_m, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "mobilize", "bench", str(zoo_q4_k_m), "--task", "generation",
                         "--prompt-len", "8", "--gen-len", "8", "--iter", "2", "--warmup", "1"],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "Microseconds per token" in ok.stdout and "llamacpp" in ok.stdout
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"\0" * 4096)
    refused = subprocess.run([sys.executable, "-m", "mobilize", "bench", str(bad), "--task", "generation"],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert "GGUF" in refused.stderr


def test_without_llamacpp_the_variants_are_refused_naming_the_set_up_step(monkeypatch):
    monkeypatch.setattr("mobilize.core.packages.installed", lambda name: name != "llama_cpp")
    why = conversion.available()
    assert why and "bash scripts/setup-llamacpp.sh" in why
    from mobilize.generation.plan import unavailable

    assert "setup-llamacpp.sh" in (unavailable(Q4_K_M) or "")


@pytest.mark.parametrize("command", ["bench", "compare"])
def test_a_gguf_without_task_generation_is_sent_there_in_one_line(tmp_path, command):
    file = tmp_path / "model.gguf"
    file.write_bytes(b"GGUF" + b"\0" * 64)
    done = subprocess.run([sys.executable, "-m", "mobilize", command, str(file), *(["-o", str(tmp_path / "o")]
                                                                                  if command == "compare" else [])],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    [line] = [x for x in done.stderr.splitlines() if x.startswith("mobilize: error")]
    assert "generative decoder" in line and "--task generation" in line
