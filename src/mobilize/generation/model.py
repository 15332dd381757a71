"""The model every decoder variant is built from, saved once as a transformers folder, and what it is measured on:
held-out token ids, the prompt timed, the ids fed to the decode steps, and the float model's own answers.

Held-out text: the Python standard library's files that ``zoo:tiny_lm`` never trained on, tokenized by the model's
own ``tokenizer.json`` (in its folder); a model without a tokenizer is measured on seeded random token ids, and
the report says so.  The float reference is the model itself: a full forward per sequence, no cache.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from mobilize.core.errors import ConfigError, UnsupportedModelError
from mobilize.sources.reference import ModelRef, RefKind

CONTINUATION_PROMPT = 16
"""Tokens of each continuation prompt."""


@dataclasses.dataclass
class PreparedModel:
    folder: Path
    """The saved transformers model every variant builds from (float32)."""
    vocab_size: int
    eval_ids: np.ndarray
    """(N, L) int64 held-out token ids."""
    text_source: str
    """Where the held-out ids come from (said in the report)."""
    prompt: list[int]
    decode_ids: list[int]
    """The float model's greedy continuation of ``prompt``: what every runtime's decode steps are fed."""
    continuation_prompts: list[list[int]]
    reference_logits: np.ndarray
    """(N, L, V) float32: the float model's teacher-forced logits on ``eval_ids``."""
    reference_continuations: list[list[int]]
    parameters: int
    notes: list[str] = dataclasses.field(default_factory=list)


def causal_lm(ref: ModelRef, trust_pickle: bool = False) -> Any:
    """The transformers causal LM a reference names (a zoo decoder's ``.lm``, a saved folder, a module that is or
    holds a ``*ForCausalLM``); refused in one line otherwise."""
    from mobilize.sources.models import resolve_model

    if ref.kind == RefKind.FILE:
        raise ConfigError(f"{ref.text} is an exported file: compare --task generation builds every engine's decoder "
                          f"file from a transformers model", hint=f"give the model (zoo:tiny_lm, a saved transformers "
                          f"folder, file.py:Class); time an existing decoder file with mobilize bench {ref.text} "
                          f"--task generation")
    source = resolve_model(ref, trust_pickle=trust_pickle)
    module = getattr(source, "module", None)
    lm = getattr(module, "lm", module)
    if lm is None or not hasattr(lm, "save_pretrained") or not type(lm).__name__.endswith("ForCausalLM"):
        raise UnsupportedModelError(f"--task generation needs a transformers causal LM (a *ForCausalLM, or a module "
                                    f"holding one as .lm); {ref.text} is a {type(lm).__name__}")
    return lm.float().eval()


def prepare(ref: ModelRef, work: Path, cfg: Any) -> PreparedModel:
    """Save the model, pick the held-out ids and prompts, and run the float reference on them."""
    import torch

    lm = causal_lm(ref)
    folder = work / "model"
    shutil.rmtree(folder, ignore_errors=True)
    lm.save_pretrained(str(folder))
    notes: list[str] = []
    source_folder = Path(ref.path) if ref.kind == RefKind.MODEL_FOLDER else None
    ids, text_source = _eval_ids(ref, source_folder, folder, int(lm.config.vocab_size), cfg, notes)
    prompt = [int(t) for t in ids[0, :cfg.prompt_tokens]]
    continuation_prompts = [[int(t) for t in ids[1 + i % (len(ids) - 1), :CONTINUATION_PROMPT]]
                            for i in range(cfg.continuations)] if len(ids) > 1 else []
    with torch.no_grad():
        logits = np.stack([lm(input_ids=torch.from_numpy(row[None]), use_cache=False).logits[0].float().numpy()
                           for row in ids])
        decode_ids = greedy(lm, prompt, cfg.gen_tokens)
        continuations = [greedy(lm, p, cfg.gen_tokens) for p in continuation_prompts]
    return PreparedModel(folder, int(lm.config.vocab_size), ids, text_source, prompt, decode_ids, continuation_prompts,
                         logits, continuations, sum(p.numel() for p in lm.parameters()), notes)


def greedy(lm: Any, prompt: list[int], steps: int) -> list[int]:
    """The float model's greedy continuation, a full forward per step (no cache: independent of any cache code)."""
    import torch

    ids = list(prompt)
    for _ in range(steps):
        logits = lm(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        ids.append(int(logits.argmax()))
    return ids[len(prompt):]


def _eval_ids(ref: ModelRef, source: Path | None, folder: Path, vocab: int, cfg: Any,
              notes: list[str]) -> tuple[np.ndarray, str]:
    """Held-out standard-library text in the model's tokenizer, else seeded random ids (said in a note)."""
    from mobilize.zoo import tiny_lm

    tokenizer_file = next((p / "tokenizer.json" for p in (source, folder) if p and (p / "tokenizer.json").exists()),
                          tiny_lm.TOKENIZER if ref.kind == RefKind.ZOO and ref.attribute == "tiny_lm" else None)
    if tokenizer_file is not None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        ids = tiny_lm.held_out_ids(cfg.eval_sequences, cfg.eval_tokens, tokenizer=tokenizer).numpy()
        if int(ids.max()) < vocab:
            return ids, (f"{cfg.eval_sequences} x {cfg.eval_tokens} tokens of the Python standard library's held-out "
                         f"files ({tokenizer_file.name} of the model)")
        notes.append(f"{tokenizer_file} gives ids beyond the model's vocabulary ({vocab}): measured on random ids")
    rng = np.random.default_rng(0)
    notes.append("no tokenizer.json with the model: perplexity and agreement are measured on seeded random token "
                 "ids, which say little about text")
    return (rng.integers(0, vocab, size=(cfg.eval_sequences, cfg.eval_tokens), dtype=np.int64),
            f"{cfg.eval_sequences} x {cfg.eval_tokens} seeded random token ids (no tokenizer)")
