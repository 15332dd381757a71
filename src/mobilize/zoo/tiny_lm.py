"""A small trained decoder: Llama architecture (transformers), its own byte-level BPE tokenizer, Python source.

Trained by ``scripts/train_tiny_lm.py`` on the Python standard library's own ``.py`` files (present on every
machine, no downloads), split by file into train and held-out by a hash of the file's relative path.  The
weights ship in ``weights/tiny_lm/`` (float16 safetensors, loaded as float32) beside ``tokenizer.json`` and
``config.json``.  Its input is int64 token ids of shape ``(1, T)``; its output the next-token logits ``(1, T, V)``.

    >>> from mobilize.zoo import ZOO
    >>> model = ZOO.get("tiny_lm").build()
    >>> ids = held_out_ids(n_sequences=2, seq_len=16)
    >>> ids.shape, model(ids[:1]).shape == (1, 16, model.vocab_size)
    (torch.Size([2, 16]), True)
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from pathlib import Path
from typing import Iterator

import torch

from mobilize.core.errors import InternalError
from mobilize.core.inputs import InputSpec
from mobilize.zoo import ZOO
from mobilize.zoo.base import ZooModel

WEIGHTS_DIR = Path(__file__).parent / "weights" / "tiny_lm"
WEIGHTS = WEIGHTS_DIR / "model.safetensors"
TOKENIZER = WEIGHTS_DIR / "tokenizer.json"
CONFIG = WEIGHTS_DIR / "config.json"
SEQ_LEN = 256
"""The context it was trained on (and the sequence length of its input spec)."""
INPUT_SPEC = InputSpec((1, SEQ_LEN), "int64")
END_OF_TEXT = "<|endoftext|>"
"""The one special token (id 0): it separates files in the training stream."""
HELD_OUT_PERCENT = 10
"""The share of the standard library's files kept out of training."""
_SKIPPED_FOLDERS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})


class TinyLM(torch.nn.Module):
    """``forward(input_ids) -> logits``: a causal LM as a one-tensor-in, one-tensor-out module (no cache).
    The transformers model, with its KV cache, is ``.lm``."""

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        self.lm = lm
        self.vocab_size = int(lm.config.vocab_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _bucket(relative: str) -> int:
    """0-99 from the file's relative path: the same split on every machine with the same Python."""
    return int.from_bytes(hashlib.sha256(relative.encode()).digest()[:4], "big") % 100


def corpus_files(split: str, root: Path | None = None) -> list[Path]:
    """The standard library's ``.py`` files of one split (``train`` or ``held-out``), sorted by relative path;
    site-packages and test folders are left out.  ``root``: another copy of a standard library (default: this
    Python's)."""
    if split not in ("train", "held-out"):
        raise InternalError(f"unknown split '{split}' (train or held-out)")
    root = root or stdlib_root()
    chosen = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if _SKIPPED_FOLDERS & set(relative.parts):
            continue
        if (_bucket(relative.as_posix()) < HELD_OUT_PERCENT) == (split == "held-out"):
            chosen.append(path)
    return chosen


def read_source(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def load_tokenizer():
    """The shipped byte-level BPE tokenizer (``tokenizers.Tokenizer``)."""
    from tokenizers import Tokenizer

    if not TOKENIZER.exists():
        raise InternalError(f"missing tokenizer {TOKENIZER}; run scripts/train_tiny_lm.py")
    return Tokenizer.from_file(str(TOKENIZER))


def _held_out_stream(tokenizer, root: Path | None) -> Iterator[list[int]]:
    """The held-out files' token ids, each followed by the end-of-text id (where the tokenizer has one: a user's
    model's tokenizer may not, and its files then follow each other), in the order of a hash of their relative
    paths (a fixed shuffle, so the first sequences come from many modules, not one package)."""
    root = root or stdlib_root()
    eot = [] if tokenizer.token_to_id(END_OF_TEXT) is None else [tokenizer.token_to_id(END_OF_TEXT)]
    files = sorted(corpus_files("held-out", root),
                   key=lambda p: hashlib.sha256(p.relative_to(root).as_posix().encode()).hexdigest())
    for path in files:
        yield tokenizer.encode(read_source(path)).ids + eot


def held_out_ids(n_sequences: int = 64, seq_len: int = SEQ_LEN, tokenizer=None, root: Path | None = None) -> torch.Tensor:
    """``n_sequences`` consecutive windows of ``seq_len`` token ids (int64, ``(n, seq_len)``) of the held-out
    files, rebuilt from this machine's standard library: the same ids on every call."""
    tokenizer = tokenizer or load_tokenizer()
    need = n_sequences * seq_len
    ids: list[int] = []
    for file_ids in _held_out_stream(tokenizer, root):
        ids += file_ids
        if len(ids) >= need:
            break
    if len(ids) < need:
        raise InternalError(f"the held-out files give {len(ids)} tokens, fewer than {n_sequences} x {seq_len}")
    return torch.tensor(ids[:need], dtype=torch.int64).view(n_sequences, seq_len)


def folder_files(vocab_size: int, fields: dict) -> dict[str, str]:
    """The JSON files beside the weights that make ``weights/tiny_lm`` a standard transformers folder, the kind the
    field's own tools take (``AutoModelForCausalLM``/``AutoTokenizer``, llama.cpp's converter, onnxruntime-genai's
    builder, optimum): the config with its architecture and model type, the tokenizer's config (a fast tokenizer
    whose one special token, ``<|endoftext|>``, is also end of sequence) and the generation config."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab_size, **fields}
    tokenizer = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT,
                 "pad_token": END_OF_TEXT, "add_bos_token": False, "add_eos_token": False,
                 "model_max_length": fields.get("max_position_embeddings", SEQ_LEN),
                 "clean_up_tokenization_spaces": False}
    generation = {"bos_token_id": fields.get("bos_token_id", 0), "eos_token_id": fields.get("eos_token_id", 0),
                  "pad_token_id": fields.get("pad_token_id", 0)}
    return {name: json.dumps(value, indent=2) + "\n" for name, value in
            [(CONFIG.name, config), ("tokenizer_config.json", tokenizer), ("generation_config.json", generation)]}


def build_config(folder: Path | None = WEIGHTS_DIR, **fields):
    """The ``LlamaConfig`` saved in ``folder`` (None: a fresh one of ``fields``, to train)."""
    from transformers import LlamaConfig

    return LlamaConfig(**(json.loads((folder / CONFIG.name).read_text()) if folder is not None else fields))


def build(folder: Path = WEIGHTS_DIR) -> TinyLM:
    """The trained model (float16 weights cast to float32), eval mode."""
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    weights = folder / WEIGHTS.name
    if not (weights.exists() and (folder / CONFIG.name).exists()):
        raise InternalError(f"missing weights in {folder}; run scripts/train_tiny_lm.py")
    config = build_config(folder)
    torch.manual_seed(0)
    lm = LlamaForCausalLM(config)
    state = {k: v.float() for k, v in load_file(str(weights)).items()}
    missing, unexpected = lm.load_state_dict(state, strict=False)
    # A tied output layer is saved once (as the embedding); anything else missing is a broken file.
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise InternalError(f"{weights} does not match its config.json: missing {missing}, unexpected {unexpected}")
    if config.tie_word_embeddings:
        lm.tie_weights()
    return TinyLM(lm.float()).eval()


ZOO.register("tiny_lm")(
    ZooModel("tiny_lm", build, (INPUT_SPEC,),
             "Llama-architecture decoder (4 layers, hidden 256) with a 4k byte-level BPE, trained on the Python "
             "standard library's source; input token ids (1, 256), output logits (1, 256, vocab)", 0,
             task="generation")
)
