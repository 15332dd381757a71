"""Issue #66 (hardening, sixth round): generate and its packages against hostile input - a closed stdout, a prompt
that is not UTF-8, a negative seed, a manifest that names another engine, a folder with no manifest, weights cut
short - each through the real command where the byte-level behaviour is the point."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def package(decoder_file, tiny_llama, tmp_path_factory):
    """onnxruntime-genai's fp32 file of the tiny Llama as the package compare writes (its tokenizer, configs and
    mobilize.json beside it)."""
    from mobilize.generation.package import write_package

    variant, path = decoder_file("onnx-genai-fp32")
    folder = tmp_path_factory.mktemp("pkg") / "onnx-genai-fp32"
    folder.mkdir()
    shutil.copytree(path, folder / "model")
    write_package(Path(tiny_llama), folder / "model", variant, 64, folder)
    return folder


def _run(*argv, stdout=subprocess.PIPE, stdin=None, input=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "mobilize", *argv], stdout=stdout, stderr=subprocess.PIPE,
                          stdin=stdin, input=input, env=env, cwd=ROOT, timeout=300)


def test_a_closed_stdout_ends_generate_quietly(package):
    """item 1: `generate ... | head -c 10`: the reader is gone before the text is; exit 0, nothing on stderr but the
    command's own lines (no "internal error", no BrokenPipeError at exit)."""
    read, write = os.pipe()
    os.close(read)  # every write to stdout fails with EPIPE, deterministically
    try:
        done = _run("generate", package, "--prompt", "abc", "--max-new-tokens", "40", "--threads", "1", stdout=write)
    finally:
        os.close(write)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "internal error" not in err and "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_prompt_that_is_not_utf8_is_one_line(package):
    """item 2: the bytes of a Latin-1 shell's prompt reach Python as lone surrogates; refused before any load."""
    done = _run("generate", package, b"--prompt", b"caf\xc3 \xff\xfe")
    assert_one_line_error(done.returncode, done.stderr.decode(), "--prompt is not UTF-8 text: byte 0xc3 at character 4")


def test_the_prompt_comes_from_a_file_or_stdin(package, tmp_path):
    """item 2: --prompt-file FILE and --prompt-file - give the same text as --prompt; a file that is not UTF-8 is
    one line."""
    typed = _run("generate", package, "--prompt", "abc", "--max-new-tokens", "6", "--threads", "1")
    assert typed.returncode == 0, typed.stderr.decode()
    piped = _run("generate", package, "--prompt-file", "-", "--max-new-tokens", "6", "--threads", "1", input=b"abc")
    assert piped.returncode == 0 and piped.stdout == typed.stdout, piped.stderr.decode()
    (tmp_path / "p.txt").write_bytes(b"abc")
    filed = _run("generate", package, "--prompt-file", tmp_path / "p.txt", "--max-new-tokens", "6", "--threads", "1")
    assert filed.stdout == typed.stdout
    (tmp_path / "bad.txt").write_bytes(b"ab\xff")
    bad = _run("generate", package, "--prompt-file", tmp_path / "bad.txt")
    assert_one_line_error(bad.returncode, bad.stderr.decode(), "is not UTF-8 text: byte 0xff at byte 3")


def test_a_negative_seed_is_refused_before_anything_loads(package, run_cli):
    """item 3: every argument is checked before the package is opened (the seed was refused after the load)."""
    code, _, err = run_cli("generate", package, "--prompt", "x", "--temperature", "1", "--seed", "-1")
    assert_one_line_error(code, err, "--seed must be 0 or more, got -1")


def test_a_manifest_naming_another_engine_is_refused(package, tmp_path, run_cli):
    """item 4: the label was taken from the editable manifest while the real engine ran."""
    copy = tmp_path / "pkg"
    shutil.copytree(package, copy)
    manifest = json.loads((copy / "mobilize.json").read_text())
    (copy / "mobilize.json").write_text(json.dumps({**manifest, "engine": "llamacpp"}))
    code, _, err = run_cli("generate", copy, "--prompt", "x")
    assert_one_line_error(code, err, "says engine 'llamacpp', but its variant onnx-genai-fp32 runs in onnxruntime")


def test_a_folder_without_a_manifest_is_named_itself(tmp_path, run_cli):
    """item 6: the folder given, not its parent."""
    (tmp_path / "pk").mkdir()
    code, _, err = run_cli("generate", tmp_path / "pk", "--prompt", "x")
    assert_one_line_error(code, err, f"{tmp_path / 'pk'} has no mobilize.json")


def test_weights_cut_short_are_named(decoder_file, tmp_path):
    """item 6: OpenVINO stopped at "Exception from src/inference/src/cpp/core.cpp:84:" and onnxruntime-genai dumped a
    C++ source path: each now names the weights file that is shorter than the model needs."""
    from mobilize.core.errors import UnsupportedModelError

    variant, xml = decoder_file("openvino-fp32")
    for suffix in (".xml", ".bin"):
        shutil.copy(Path(xml).with_suffix(suffix), tmp_path / f"m{suffix}")
    weights = tmp_path / "m.bin"
    weights.write_bytes(weights.read_bytes()[:weights.stat().st_size // 2])
    with pytest.raises(UnsupportedModelError, match="m.bin is shorter than m.xml needs"):
        variant.load(tmp_path / "m.xml", 1, 16)

    variant, folder = decoder_file("onnx-genai-fp32")
    cut = tmp_path / "genai"
    shutil.copytree(folder, cut)
    data = max((p for p in cut.iterdir() if p.name.startswith("model.onnx")), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
    with pytest.raises(UnsupportedModelError, match="truncated or corrupt|past its end"):
        variant.load(cut, 1, 16)


def test_generate_leaves_nothing_in_the_temp_folder(package, tmp_path):
    """item 7: onnxruntime-genai's telemetry wrote a session file (.ses) into TMPDIR at every load and transformers'
    import (through torchao) made an empty torchinductor_<user>/ there; a run leaves its temp folder as it found it."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TMPDIR=str(temp))
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-m", "mobilize", "generate", package, "--prompt", "abc",
                           "--max-new-tokens", "4", "--threads", "1"], capture_output=True, env=env, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert [p.name for p in temp.iterdir() if not p.name.startswith("mobilize-stderr-")] == []


SUBREAPER = """
import ctypes, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of the command come to this process
code = subprocess.run(sys.argv[1:], capture_output=True).returncode
left = []
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == os.getpid():
            left.append(f"{entry} {stat[0]}")
print(code, len(left), left)
"""


def test_a_refused_bench_leaves_no_orphan_and_no_zombie(tmp_path):
    """item 7: `bench zoo:tiny_lm --task generation --prompt-len 200 --gen-len 100` exits 2, and nothing it started
    outlives it (its resource tracker was a <defunct> child re-parented to init for up to 2 s; a child killed after
    it had answered left a semaphore the tracker warned about)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, "-c", SUBREAPER, sys.executable, "-m", "mobilize", "bench", "zoo:tiny_lm",
                           "--task", "generation", "--prompt-len", "200", "--gen-len", "100"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    code, count, _ = done.stdout.split(" ", 2)
    assert (code, count) == ("2", "0"), done.stdout


def test_a_prompt_past_the_context_is_one_line_and_no_echo(package, tmp_path):
    """item 5: a prompt longer than the tokenizer's and the file's length printed transformers' "Token indices
    sequence length is longer ..." warning before mobilize's own line, under the echoed prompt."""
    copy = tmp_path / "pkg"
    shutil.copytree(package, copy)
    config = json.loads((copy / "tokenizer_config.json").read_text())
    (copy / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 32}))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("TRANSFORMERS_VERBOSITY", None)
    done = subprocess.run([sys.executable, "-m", "mobilize", "generate", copy, "--prompt", "abcd" * 50], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert_one_line_error(done.returncode, done.stderr, "holds 64")
    assert done.stdout == ""
