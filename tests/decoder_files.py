"""Every engine's decoder files built once per test session from one tiny random Llama, and the checks they share.

A pytest plugin module (listed in ``tests/conftest.py``'s ``pytest_plugins``): ``tiny_llama`` is the saved
transformers folder; ``decoder_file(name)`` builds the variant ``name`` (``onnx-int4``, ``onnx-int4@g16``) from it
the first time it is asked for and returns (variant, path), so the contract test over the registry
(tests/contract/test_decoders.py) and each engine's own tests (tests/backends/<engine>/) share one build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

MAX_LEN = 64
"""Positions of the tiny model (its cache holds this many tokens)."""
VOCAB = 128
PROMPT = [int(t) for t in np.random.default_rng(1).integers(0, VOCAB, 12)]
OTHER = [int(t) for t in np.random.default_rng(2).integers(0, VOCAB, 30)]
"""A longer sequence run between two prefills of PROMPT: the second must not see it (reset)."""
STEPS = 8


CACHE_ENV = "MOBILIZE_TEST_BUILDS"
"""Where builds are kept across test runs (default ``~/.cache/mobilize/test-builds``); ``off``: every run builds."""


def shared_build(tmp_path_factory, key: str, make: Callable[[Path], Path], engine: str | None = None) -> Path:
    """``make(folder)`` once per test run (:func:`tests.conftest.once_per_run`): an ExecuTorch 8da4w build of the
    tiny model takes ~25-55 s, and each pytest-xdist worker building its own cost a minute of the suite.  Kept across
    runs too (:func:`across_runs`), keyed by the source that builds it: ``engine``'s code and everything outside the
    other engines' folders (None: nothing of mobilize's), this file, the installed packages and the CPU."""
    from tests.conftest import once_per_run

    made, _ = once_per_run(tmp_path_factory, key, lambda folder: str(across_runs(key, engine, make, folder)))
    return Path(made)


def across_runs(key: str, engine: str | None, make: Callable[[Path], Path], folder: Path) -> Path:
    """The path ``make`` built, from the cache folder of this source's digest when a run built it before; else
    built into ``folder`` and then kept there (moved in whole: a half-written build is never found)."""
    import json
    import os
    import shutil
    import tempfile

    base = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache" / "mobilize" / "test-builds")
    if base == "off":
        return make(folder)
    kept = Path(base) / f"{key}-{source_digest(engine)}"
    index = kept.with_name(kept.name + ".json")  # beside the folder: tests list what a build wrote in it
    if index.is_file() and kept.is_dir():
        return kept / json.loads(index.read_text())["path"]
    Path(base).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=base))
    try:
        relative = str(make(staging).relative_to(staging))
        shutil.rmtree(kept, ignore_errors=True)  # a build whose index was never written (an interrupted run)
        os.replace(staging, kept)
        note = index.with_name(f".{index.name}.{os.getpid()}")
        note.write_text(json.dumps({"path": relative}))
        os.replace(note, index)  # the index last: a folder without one is never used
        _keep_newest(Path(base), key, KEEP_PER_KEY)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return kept / json.loads(index.read_text())["path"]


KEEP_PER_KEY = 4
"""Builds of one key (each of another source) kept: the latest few, so the folder does not grow with every change."""


def _keep_newest(base: Path, key: str, keep: int) -> None:
    """Remove all but the ``keep`` newest builds of ``key`` (a build is its folder and its index beside it)."""
    import re
    import shutil

    pattern = re.compile(re.escape(key) + r"-[0-9a-f]{16}\.json")
    builds = sorted((p for p in base.iterdir() if pattern.fullmatch(p.name)), key=lambda p: p.stat().st_mtime)
    for index in builds[:-keep]:
        index.unlink(missing_ok=True)  # the index first: a folder without one is never used
        shutil.rmtree(index.with_suffix(""), ignore_errors=True)


def source_digest(engine: str | None) -> str:
    """sha256 (16 hex digits) of what a build of ``engine``'s depends on: mobilize's sources but the other engines'
    folders (a backend imports no other backend: the architecture test holds that), this file, every installed
    distribution's version, the Python version and the CPU's flags."""
    import hashlib
    import importlib.metadata
    import platform
    import sysconfig

    h = hashlib.sha256()
    src = Path(__file__).resolve().parents[1] / "src" / "mobilize"
    if engine is not None:
        for path in sorted(src.rglob("*")):
            rel = path.relative_to(src).parts
            if not path.is_file() or "__pycache__" in rel or (rel[0] == "backends" and len(rel) > 2 and rel[1] != engine):
                continue
            h.update("/".join(rel).encode() + b"\0" + path.read_bytes())
    h.update(Path(__file__).read_bytes())
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})  # not what a test put on sys.path
    versions = sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions(path=site)})
    h.update("\n".join(versions).encode() + platform.python_version().encode())
    try:
        h.update(next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).encode())
    except (OSError, StopIteration):
        h.update(platform.machine().encode())
    return h.hexdigest()[:16]


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """A random Llama (2 layers, hidden 64, 4 heads of 16, 2 KV heads, 128 tokens, 64 positions; ONNX Runtime's
    GroupQueryAttention takes head sizes that are multiples of 16), saved as ``save_pretrained`` writes it, with a
    byte-level BPE tokenizer beside it (one folder for every worker)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    def make(path: Path) -> Path:
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=MAX_LEN))
        model.save_pretrained(path)
        save_byte_tokenizer(path)
        return path

    return shared_build(tmp_path_factory, "tiny-llama", make)


def save_byte_tokenizer(folder: Any, vocab_size: int = VOCAB, eos_id: int | None = None) -> None:
    """A byte-level BPE tokenizer of ``vocab_size`` ids: the lowest bytes and 8 merges (GPT-2's byte-to-character map
    and split),
    saved beside a model as ``tokenizer.json`` + ``tokenizer_config.json``: an engine whose file carries the
    tokenizer (llama.cpp's GGUF) needs one to build."""
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):  # GPT-2's bytes_to_unicode
        chars[byte] = chr(byte) if byte in printable else chr(256 + extra)
        extra += byte not in printable
    pairs = [("a", "b"), ("c", "d"), ("e", "f"), ("g", "h"), ("i", "j"), ("k", "l"), ("m", "n"), ("o", "p")]
    vocab = {chars[b]: b for b in range(vocab_size - len(pairs))}  # the lowest bytes, then 8 merged pairs
    vocab.update({a + b: vocab_size - len(pairs) + i for i, (a, b) in enumerate(pairs)})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs))  # llama.cpp's BPE vocabulary needs merges
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if eos_id is not None:  # the model's end token, named by the tokenizer too (GenAI's config takes both)
        config["eos_token"] = chars[eos_id]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


@pytest.fixture(scope="session")
def decoder_file(tiny_llama, tmp_path_factory) -> Callable[[str], tuple[Any, Any]]:
    """name -> (variant, built path); the variant is skipped, with its reason, where it cannot run here."""
    from mobilize.generation.plan import generation_variants
    from mobilize.generation.plan import unavailable

    built: dict[str, tuple[Any, Any]] = {}

    def get(name: str) -> tuple[Any, Any]:
        if name not in built:
            [variant] = generation_variants([name])
            why = unavailable(variant)
            if why:
                pytest.skip(f"{name}: {why}")
            key = name.replace("@", "-")
            built[name] = (variant, shared_build(tmp_path_factory, key,
                                                 lambda folder: variant.build_file(tiny_llama, folder),
                                                 engine=variant.engine))
        return built[name]

    return get


def eager(model: Any, ids: list[int]) -> np.ndarray:
    """The transformers model's own logits for ``ids`` (a full forward, no cache)."""
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].numpy()


def greedy(session: Any, prompt: list[int], steps: int) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """(prefill logits, each decode step's logits, greedy tokens)."""
    first = session.prefill(prompt)
    tokens, steps_logits = [int(first[-1].argmax())], []
    for _ in range(steps):
        logits = session.decode(tokens[-1])
        steps_logits.append(logits)
        tokens.append(int(logits.argmax()))
    return first, steps_logits, tokens


def close(got: np.ndarray, want: np.ndarray, rel: float = 1e-4) -> bool:
    """Within ``rel`` of the largest reference logit (float files: rounding)."""
    return bool(np.abs(got - want).max() <= rel * np.abs(want).max() + 1e-6)
