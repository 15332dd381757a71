"""The model every decoder variant is built from, saved once as a transformers folder, and what it is measured on:
held-out token ids, the prompt timed, the ids fed to the decode steps, and the float model's own answers.

Held-out text: the Python standard library's files that ``zoo:tiny_lm`` never trained on, tokenized by the model's
own ``tokenizer.json`` (in its folder); a model without a tokenizer is measured on seeded random token ids, and
the report says so.  The float reference is the model itself: a full forward per sequence, no cache; its greedy
continuations are decoded with transformers' own cache and each token confirmed by a cache-free forward
(:func:`reference_greedy`).
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
"""Tokens of each continuation prompt (fewer when ``--prompt-len`` is shorter)."""


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
    context: int | None = None
    """The longest sequence the model was made for (None: its config does not say)."""
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The lengths in force (the held-out window adapted to the context)."""
    shapes: dict[str, int] = dataclasses.field(default_factory=dict)
    """What one decoded token reads, by kind (:func:`decoder_shapes`)."""


def causal_lm(ref: ModelRef, trust_pickle: bool = False) -> Any:
    """The transformers causal LM a reference names - a zoo decoder's ``.lm``, a saved folder, a module that is or
    holds (as ``.lm``) a model transformers' ``AutoModelForCausalLM`` builds - float32, eval; refused in one line
    otherwise, before any build."""
    from mobilize.lowering.causal_lm import CAUSAL_LM_HINT, is_causal_lm, load_causal_lm
    from mobilize.sources.models import resolve_model

    if ref.kind == RefKind.FILE:
        raise ConfigError(f"{ref.text} is an exported file: compare --task generation builds every engine's decoder "
                          f"file from a transformers model", hint=f"give the model (zoo:tiny_lm, a saved transformers "
                          f"folder, file.py:Class); time an existing decoder file with mobilize bench {ref.text} "
                          f"--task generation")
    if ref.kind == RefKind.MODEL_FOLDER:
        return load_causal_lm(Path(ref.path))
    source = resolve_model(ref, trust_pickle=trust_pickle)
    module = getattr(source, "module", None)
    lm = getattr(module, "lm", module)
    if lm is None or not is_causal_lm(lm):
        raise UnsupportedModelError(f"{ref.text} is a {type(lm).__name__}, not a transformers causal LM (a model "
                                    f"AutoModelForCausalLM builds, or a module holding one as .lm)",
                                    hint=CAUSAL_LM_HINT)
    return lm.float().eval()


def context_length(config: Any) -> int | None:
    """The longest sequence the model was made for (``max_position_embeddings``, GPT-2's ``n_positions``), or None."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


MAX_DECODER_TOKENS = 32768
"""The longest sequence a decoder run takes: a flag past it is refused before the model loads (a 100,000-token
prompt would otherwise hold the reference for minutes before its context is read)."""


def check_decoder_lengths(prompt_tokens: int, gen_tokens: int, eval_tokens: int | None = None,
                          eval_sequences: int = 2) -> None:
    """A causal LM's lengths, before any work: each at least its least, within the most any model here takes (the
    model's own context is checked against them as soon as it loads, before any build)."""
    from mobilize.core.checks import check_at_least

    check_at_least(prompt_tokens, 1, "--prompt-len")
    check_at_least(gen_tokens, 1, "--gen-len")
    if eval_tokens is not None:
        check_at_least(eval_tokens, 2, "--eval-len")
    check_at_least(eval_sequences, 2, "--eval-sequences")
    for flag, value in (("--prompt-len", prompt_tokens), ("--gen-len", gen_tokens), ("--eval-len", eval_tokens or 0)):
        if value > MAX_DECODER_TOKENS:
            raise ConfigError(f"{flag} {value} is past any context a decoder here is built for "
                              f"({MAX_DECODER_TOKENS} tokens)", hint=f"give {flag} within the model's context")


def check_lengths(settings: dict[str, Any], context: int | None, model: str) -> dict[str, Any]:
    """The run's lengths against the model's context, before any work: the prompt and generated tokens must fit
    (``--prompt-len`` + ``--gen-len`` + 1 <= context, refused in one line); the held-out window adapts to a shorter
    context unless ``--eval-len`` was given.  Returns the settings in force (``eval_tokens``, ``max_len``).

        >>> check_lengths({"prompt_tokens": 32, "gen_tokens": 32, "eval_tokens": 128}, 100, "m")["eval_tokens"]
        99
    """
    s = dict(settings)
    if context is None:
        return s
    need = s["prompt_tokens"] + s["gen_tokens"] + 1
    if need > context:
        raise ConfigError(f"--prompt-len {s['prompt_tokens']} + --gen-len {s['gen_tokens']} tokens (and the one "
                          f"decoded after them) do not fit {model}'s context of {context} tokens",
                          hint=f"keep --prompt-len + --gen-len under {context}")
    if s["eval_tokens"] + 1 > context:
        if s.get("eval_tokens_given"):
            raise ConfigError(f"--eval-len {s['eval_tokens']} does not fit {model}'s context of {context} tokens",
                              hint=f"give --eval-len {context - 1} or less")
        s["eval_tokens"] = context - 1
    s["max_len"] = max(s["eval_tokens"], s["prompt_tokens"] + s["gen_tokens"]) + 1
    return s


def prepare(ref: ModelRef, folder: Path, settings: dict[str, Any], trust_pickle: bool = False) -> PreparedModel:
    """Save the model into ``folder``, check the lengths, pick the held-out ids and prompts, and run the float
    reference on them (teacher-forced full forwards; greedy continuations every token of which a cache-free forward
    confirms: :func:`reference_greedy`)."""
    import torch

    lm = causal_lm(ref, trust_pickle)
    context = context_length(lm.config)
    s = check_lengths(settings, context, ref.text)
    shutil.rmtree(folder, ignore_errors=True)
    lm.save_pretrained(str(folder))
    source_folder = Path(ref.path) if ref.kind == RefKind.MODEL_FOLDER else None
    from mobilize.generation.package import copy_tokenizer
    from mobilize.zoo import tiny_lm

    zoo_lm = ref.kind == RefKind.ZOO and ref.attribute == "tiny_lm"
    copy_tokenizer(tiny_lm.WEIGHTS_DIR if zoo_lm else source_folder, folder)  # every package built from it carries it
    notes: list[str] = []
    if s["eval_tokens"] != settings["eval_tokens"]:
        notes.append(f"held-out window: {s['eval_tokens']} tokens, the model's context less one (--eval-len sets it)")
    ids, text_source = _eval_ids(ref, source_folder, folder, int(lm.config.vocab_size), s, notes)
    prompt = _prompt_ids(ids, ref, source_folder, folder, int(lm.config.vocab_size), s)
    head = min(CONTINUATION_PROMPT, s["prompt_tokens"])  # so a continuation fits the cache the prompt's run does
    continuation_prompts = [[int(t) for t in ids[1 + i % (len(ids) - 1), :head]]
                            for i in range(s["continuations"])] if len(ids) > 1 else []
    with torch.no_grad():
        logits = np.stack([lm(input_ids=torch.from_numpy(row[None]), use_cache=False).logits[0].float().numpy()
                           for row in ids])
    decode_ids = reference_greedy(lm, prompt, s["gen_tokens"])
    continuations = [reference_greedy(lm, p, s["gen_tokens"]) for p in continuation_prompts]
    return PreparedModel(folder, int(lm.config.vocab_size), ids, text_source, prompt, decode_ids, continuation_prompts,
                         logits, continuations, sum(p.numel() for p in lm.parameters()), notes, context, s,
                         decoder_shapes(lm))


def reference_greedy(lm: Any, prompt: list[int], steps: int) -> list[int]:
    """The float model's ``steps`` greedy tokens after ``prompt``, every one its cache-free choice.

    Decoding with no cache costs a forward over the whole sequence per token (the 1B shape's reference ran past
    compare's 600 s a stage that way), so the tokens are decoded with transformers' own KV cache, then confirmed by
    one cache-free forward over the prompt and the tokens (a causal model's logits at each position are those of
    its prefix): each token must be that forward's most likely at its position.  From the first that is not (a
    near-tie the two paths round differently) the cache-free choice is kept and the rest decoded again, so the
    files' caches are still judged against tokens no cache code decided.

        >>> from mobilize.zoo import ZOO
        >>> from mobilize.bench.decoding import FullForward, greedy
        >>> lm = ZOO.get("tiny_lm").build().lm
        >>> reference_greedy(lm, [5, 6, 7], 6) == greedy(FullForward(lm, 16), [5, 6, 7], 6)
        True
    """
    import torch

    kept: list[int] = []
    while True:
        tokens = kept + _cached_greedy(lm, prompt + kept, steps - len(kept))
        with torch.no_grad():
            logits = lm(input_ids=torch.tensor([prompt + tokens[:-1]]), use_cache=False).logits[0]
        chosen = logits[len(prompt) - 1:].argmax(-1).tolist()
        first = next((i for i in range(len(kept), steps) if chosen[i] != tokens[i]), None)  # kept ones stay
        if first is None:
            return tokens
        kept = tokens[:first] + [int(chosen[first])]
        if len(kept) == steps:
            return kept


def _cached_greedy(lm: Any, ids: list[int], steps: int) -> list[int]:
    """``steps`` greedy tokens after ``ids`` with transformers' KV cache (none when ``steps`` is 0): ``cache`` in
    transformers 5.24 on, ``past_key_values`` in the models that still name it so."""
    import inspect

    import torch

    name = "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"
    out: list[int] = []
    cache = None
    feed = ids
    with torch.no_grad():
        while len(out) < steps:
            step = lm(input_ids=torch.tensor([feed]), use_cache=True, **{name: cache})
            cache = getattr(step, name)
            out.append(int(step.logits[0, -1].argmax()))
            feed = out[-1:]
    return out


def decoder_shapes(lm: Any) -> dict[str, int]:
    """What one decoded token reads, by kind (:func:`mobilize.bench.bandwidth.bytes_per_token`): the linear weights
    (the output head included) and their output rows, one row of the input embedding, and every other parameter
    (norms); a tensor shared by two modules (a tied embedding and head) counted once, as the head."""
    import torch

    seen: set[int] = set()
    linear = rows = 0
    for module in lm.modules():
        if isinstance(module, torch.nn.Linear) and id(module.weight) not in seen:
            seen.add(id(module.weight))
            linear += module.weight.numel()
            rows += module.weight.shape[0]
    embedding = lm.get_input_embeddings().weight
    row = embedding.shape[1] if id(embedding) not in seen else 0  # tied: the head already reads the whole table
    seen.add(id(embedding))
    other = sum(p.numel() for p in lm.parameters() if id(p) not in seen)
    return {"linear": linear, "linear_rows": rows, "embedding_row": row, "other": other}


def _prompt_ids(ids: np.ndarray, ref: ModelRef, source: Path | None, folder: Path, vocab: int,
                s: dict[str, Any]) -> list[int]:
    """The timed prompt: the first ``prompt_tokens`` ids of the held-out stream (its windows are consecutive), read
    again for that length where the windows hold fewer (a 512-token prompt beside 32-token windows was cut to 32)."""
    length = s["prompt_tokens"]
    if length > ids.size:
        ids, _ = _eval_ids(ref, source, folder, vocab, {**s, "eval_sequences": 1, "eval_tokens": length}, [],
                           least=1)
    return [int(t) for t in ids.reshape(-1)[:length]]


def _eval_ids(ref: ModelRef, source: Path | None, folder: Path, vocab: int, s: dict[str, Any],
              notes: list[str], least: int = 2) -> tuple[np.ndarray, str]:
    """The user's own text (``--data FILE.txt`` or a folder of ``.txt`` files), else the Python standard library's
    held-out files, in the model's tokenizer; else seeded random ids (said in a note).  ``least``: the windows the
    user's text must fill."""
    from mobilize.zoo import tiny_lm

    n, length = s["eval_sequences"], s["eval_tokens"]
    tokenizer_file = next((p / "tokenizer.json" for p in (source, folder) if p and (p / "tokenizer.json").exists()),
                          tiny_lm.TOKENIZER if ref.kind == RefKind.ZOO and ref.attribute == "tiny_lm" else None)
    if s.get("text") and tokenizer_file is None:
        raise ConfigError(f"--data {s['text']}: {ref.text} has no tokenizer.json to turn the text into token ids",
                          hint="save the tokenizer beside the model (tokenizer.save_pretrained(folder))")
    if tokenizer_file is not None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        if s.get("text"):
            return _user_text_ids(Path(s["text"]), tokenizer, n, length, vocab, notes, least)
        ids = tiny_lm.held_out_ids(n, length, tokenizer=tokenizer).numpy()
        if int(ids.max()) < vocab:
            return ids, (f"{n} x {length} tokens of the Python standard library's held-out files ({tokenizer_file.name} "
                         f"of the model), not the text the model was trained on unless that was Python: give your own "
                         f"with --data FILE.txt")
        notes.append(f"{tokenizer_file} gives ids beyond the model's vocabulary ({vocab}): measured on random ids")
    rng = np.random.default_rng(0)
    notes.append("no tokenizer.json with the model: perplexity and agreement are measured on seeded random token "
                 "ids, which say little about text")
    return (rng.integers(0, vocab, size=(n, length), dtype=np.int64),
            f"{n} x {length} seeded random token ids (no tokenizer)")


def _user_text_ids(path: Path, tokenizer: Any, n: int, length: int, vocab: int,
                   notes: list[str], least: int = 2) -> tuple[np.ndarray, str]:
    """Up to ``n`` consecutive windows of ``length`` token ids of the user's text (a file, or a folder's ``.txt``
    files in name order); at least ``least`` windows, refused in one line otherwise."""
    files = sorted(path.rglob("*.txt")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise ConfigError(f"--data {path}: no text file there", hint="give a .txt file or a folder of .txt files")
    ids: list[int] = []
    for f in files:
        try:
            ids += tokenizer.encode(f.read_text(encoding="utf-8", errors="replace")).ids
        except OSError as exc:
            raise ConfigError(f"--data {f}: cannot be read ({exc.strerror})") from None
    windows = min(n, len(ids) // length)
    if windows < least:
        raise ConfigError(f"--data {path} gives {len(ids)} tokens: fewer than {least} window(s) of {length}",
                          hint="give more text, or shorter windows (--eval-len; the prompt, --prompt-len)")
    if max(ids) >= vocab:
        raise ConfigError(f"--data {path}: the tokenizer gives ids beyond the model's vocabulary of {vocab}")
    if windows < n:
        notes.append(f"--data {path}: {windows} windows of {length} tokens (the text holds no more)")
    out = np.asarray(ids[:windows * length], dtype=np.int64).reshape(windows, length)
    return out, f"{windows} x {length} tokens of your text {path} ({len(files)} file(s))"
