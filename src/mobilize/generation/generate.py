"""Text in, text out with a decoder package (``mobilize generate``, ``mobilize.generate``): the prompt tokenized by
the package's own tokenizer (its chat template applied with ``chat``), one prefill, then decode steps on the
file's KV cache in its engine's session, each token picked greedily (the default: the float model's continuation
for a float file) or sampled (temperature, top-k, top-p, seeded), streamed as text as it is produced, stopping at
the model's end-of-sequence tokens or ``max_new_tokens``; then the time to the first token and tokens per second.

The loop is the one every measure decodes with (:func:`mobilize.bench.decoding.continue_tokens`); the picker is
written here (numpy, 20 lines) because each peer's sampler lives inside its own runtime (llama.cpp's, GenAI's
Generator) and none runs another engine's session.

    >>> import numpy as np
    >>> pick = Sampling().picker()
    >>> pick(np.array([0.1, 3.0, 0.2]))
    1
    >>> draw = Sampling(temperature=1.0, top_k=1, seed=0).picker()
    >>> draw(np.array([0.1, 3.0, 0.2]))
    1
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mobilize.core.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    """0: greedy (the most likely token); above 0: sampled from the softmax of logits / temperature."""
    top_k: int = 0
    """Sample among the k most likely tokens only (0: all)."""
    top_p: float = 1.0
    """Sample among the fewest most likely tokens whose probabilities add up to p (1: all)."""
    seed: int = 0
    """The same seed gives the same tokens (sampling only)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError(f"--temperature must be 0 (greedy) or more, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"--top-k must be 0 (all tokens) or more, got {self.top_k}")
        if not (0 < self.top_p <= 1):
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.seed < 0:  # numpy's generator takes none, and it would be said only after the model loaded
            raise ConfigError(f"--seed must be 0 or more, got {self.seed}")

    def picker(self) -> Callable[[Any], int]:
        """logits (V,) -> the next token."""
        if self.temperature == 0:
            return lambda logits: int(np.argmax(logits))
        rng = np.random.default_rng(self.seed)

        def draw(logits: Any) -> int:
            x = np.asarray(logits, dtype=np.float64) / self.temperature
            order = np.argsort(-x, kind="stable")
            if self.top_k:
                order = order[:self.top_k]
            p = np.exp(x[order] - x[order[0]])
            p /= p.sum()
            keep = int(np.searchsorted(np.cumsum(p), self.top_p) + 1)
            p = p[:keep] / p[:keep].sum()
            return int(order[rng.choice(len(p), p=p)])

        return draw


@dataclasses.dataclass(frozen=True)
class GenerateConfig:
    prompt: str
    max_new_tokens: int = 64
    sampling: Sampling = Sampling()
    chat: bool = False
    """Wrap the prompt in the tokenizer's chat template as a user turn (refused when it has none)."""
    threads: int | None = None

    def __post_init__(self) -> None:
        text_of(self.prompt, "--prompt")


def text_of(prompt: str | bytes, where: str) -> str:
    r"""The prompt as text: bytes (a file's, stdin's) decoded as UTF-8, a str checked to be text (a command-line
    argument that is not UTF-8 reaches Python as lone surrogates, which no tokenizer takes); refused in one line
    naming the first bad byte.

        >>> text_of(b"caf\xc3\xa9", "--prompt-file")
        'café'
        >>> text_of("caf\udcc3 ok", "--prompt")
        Traceback (most recent call last):
        ...
        mobilize.core.errors.ConfigError: --prompt is not UTF-8 text: byte 0xc3 at character 4 ...
    """
    if isinstance(prompt, bytes):
        try:
            return prompt.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = prompt[exc.start:exc.start + 1].hex()
            raise ConfigError(f"{where} is not UTF-8 text: byte 0x{bad} at byte {exc.start + 1}",
                              hint="give the prompt as UTF-8 (iconv -t UTF-8 converts a file)") from None
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(prompt[exc.start])
        byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        raise ConfigError(f"{where} is not UTF-8 text: {byte} at character {exc.start + 1}",
                          hint="give the prompt as UTF-8 (iconv -t UTF-8 converts a file; --prompt-file reads one)") \
            from None
    return prompt


@dataclasses.dataclass
class Generated:
    text: str
    token_ids: list[int]
    prompt_tokens: int
    stopped: str
    """``eos`` (the model ended it) or ``length`` (max_new_tokens reached)."""
    ttft_ms: float
    """The prompt's prefill and the first token's pick."""
    tokens_per_s: float | None
    """Decoded tokens after the first, over the time they took (None when only one was made)."""
    variant: str
    engine: str

    def speed_line(self) -> str:
        rate = f"{self.tokens_per_s:.1f} tokens/s" if self.tokens_per_s else "- tokens/s"
        return (f"{len(self.token_ids)} tokens ({self.stopped}) from a {self.prompt_tokens}-token prompt: time to first "
                f"token {self.ttft_ms:.1f} ms, {rate} ({self.variant}, {self.engine})")


def generate(path: str | Path, config: GenerateConfig, on_text: Callable[[str], None] | None = None) -> Generated:
    """Generate from the decoder package at ``path``; ``on_text`` gets each new piece of text as it is produced."""
    from mobilize.bench.decoding import continue_tokens
    from mobilize.core.checks import check_at_least, check_threads, default_threads
    from mobilize.generation.package import open_package, stop_tokens
    from mobilize.generation.plan import generation_variants

    check_at_least(config.max_new_tokens, 1, "--max-new-tokens")
    check_threads(config.threads)
    package = open_package(Path(path))
    tokenizer = _tokenizer(package.folder)
    ids = _prompt_ids(tokenizer, config, package.folder)
    [variant] = generation_variants([package.variant])
    need = len(ids) + config.max_new_tokens + 1
    if package.max_len is not None and need > package.max_len:
        raise ConfigError(f"a {len(ids)}-token prompt and --max-new-tokens {config.max_new_tokens} need {need} "
                          f"positions; {package.variant}'s file holds {package.max_len}",
                          hint=f"keep the prompt and --max-new-tokens under {package.max_len}")
    session = variant.load(package.file, config.threads or default_threads(), need)
    stream = _Stream(tokenizer, on_text)
    try:
        t0 = time.perf_counter()
        times: list[float] = []
        out = continue_tokens(session, ids, config.max_new_tokens, pick=config.sampling.picker(),
                              stop=set(stop_tokens(package.folder)),
                              on_token=lambda t: (times.append(time.perf_counter()), stream.add(t)))
    finally:
        session.close()
    ended = bool(out) and out[-1] in set(stop_tokens(package.folder))
    rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None
    return Generated(stream.text, out, len(ids), "eos" if ended else "length", 1000 * (times[0] - t0) if times else 0.0,
                     rate, variant.name, variant.engine)  # what ran, not what the (editable) manifest says


class _Stream:
    """Text as tokens come: each call decodes everything so far and hands on what is new (a multi-byte character
    split across tokens waits for its last byte)."""

    def __init__(self, tokenizer: Any, on_text: Callable[[str], None] | None):
        self.tokenizer, self.on_text, self.ids, self.text = tokenizer, on_text, [], ""

    def add(self, token: int) -> None:
        self.ids.append(int(token))
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return
        new, self.text = text[len(self.text):], text
        if new and self.on_text:
            self.on_text(new)


def _tokenizer(folder: Path) -> Any:
    """The package's tokenizer (transformers' fast tokenizer over ``tokenizer.json``, its config when there is one)."""
    if not (folder / "tokenizer.json").is_file():
        raise ConfigError(f"{folder} has no tokenizer.json: this package takes token ids, not text",
                          hint="save the tokenizer beside the model and build the files again")
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if (folder / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(str(folder))
    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))


def _prompt_ids(tokenizer: Any, config: GenerateConfig, folder: Path) -> list[int]:
    if config.chat:
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(f"--chat: the tokenizer in {folder} has no chat template",
                              hint="leave out --chat to continue the prompt as plain text")
        ids = tokenizer.apply_chat_template([{"role": "user", "content": config.prompt}], add_generation_prompt=True,
                                            tokenize=True)
        ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
    else:
        ids = tokenizer.encode(config.prompt, add_special_tokens=False)
    if not ids:
        raise ConfigError("--prompt gives no tokens", hint="give some text")
    return [int(t) for t in ids]
