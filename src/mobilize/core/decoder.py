"""What an engine declares to build and run a causal decoder (a generative model with a KV cache).

An engine lists its decoder variants on its descriptor (``Backend.decoders``: variant name ->
``module:VARIANT``, a :class:`DecoderVariant`).  A variant builds its file from a saved transformers model folder
(``config.json`` + weights, as ``save_pretrained`` writes it: the zoo's decoder and a user's own checkpoint alike)
and loads it as a :class:`DecoderSession`, which every measure drives the same way: ``prefill`` a prompt (the
logits of every position, for teacher-forced quality) or ``first`` (the last position's, as an app starts: the timed
time to first token), then ``decode`` one token at a time with the cache.

    >>> v = DecoderVariant(name="eager-fp32", engine="eager", weights="fp32", promise=Promise.FLOAT,
    ...                    build=lambda folder, out: folder, load=lambda path, threads, max_len: None)
    >>> v.promise, v.weights
    (<Promise.FLOAT: 'float'>, 'fp32')
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence


class Promise(enum.StrEnum):
    """What a decoder file promises against the model it was built from (its fidelity rule)."""

    FLOAT = "float"
    """Same weights, float32 compute: the same tokens, logits to rounding."""
    QUANTIZED = "quantized"
    """Weights (and maybe activations) quantized: judged by token agreement and perplexity, not logits."""


class DecoderSession(Protocol):
    """A decoder file loaded in its runtime, with its KV cache."""

    max_len: int
    """Tokens the cache holds (prompt and generated together)."""

    def prefill(self, ids: Sequence[int]) -> Any:
        """Start a sequence: run the prompt and return the logits of every position (float32, [T, V])."""

    def first(self, ids: Sequence[int]) -> Any:
        """Start a sequence as an app does before its first token: run the prompt and return the last position's
        logits only (float32, [V]); an engine whose file lets it computes the output head at that position alone."""

    def decode(self, token: int) -> Any:
        """Append one token (the cache grows by one) and return the next position's logits (float32, [V])."""

    def step(self, token: int) -> None:
        """As ``decode``, the logits left in the engine (the timed loop, which feeds fixed ids: an app's sampler
        reads them where the engine keeps them; copying a vocabulary-wide row out to Python is not the file's
        time)."""

    def close(self) -> None: ...


class CachedDecoderSession:
    """The sequence bookkeeping every engine's session shares: ``prefill`` checks that the prompt fits the cache,
    empties it (``_start``) and runs the prompt from position 0; ``first`` does the same for the last position's
    logits only; ``decode`` (and ``step``, which hands no logits out) checks that a sequence was started and that the cache has room, then runs one token at
    the next position.  An engine implements ``_start()`` and ``_forward(ids, start)`` (the logits of each of
    ``ids``, float32 [len(ids), V]), and ``_forward_last(ids, start)`` (the last one's, [V]) where its file can
    compute the head at one position or hand out one row without copying the rest (the default takes the last row
    of ``_forward``); ``last_position`` says which.  ``_pos`` is None until a prefill, and is set back to None by
    anything that empties the cache behind the session (a reload)."""

    max_len: int
    _pos: int | None = None
    not_started = "decode before prefill: prefill first"
    """The refusal of a decode with no sequence started (an engine may name its other causes)."""

    def _start(self) -> None:
        raise NotImplementedError

    last_position: str = ""
    """How ``first`` reaches the last position's logits (said in the notes): empty where the file computes the head
    at every prompt position and the last row is taken (the default ``_forward_last``)."""

    def _forward(self, ids: list[int], start: int) -> Any:
        raise NotImplementedError

    def _forward_last(self, ids: list[int], start: int) -> Any:
        return self._forward(ids, start)[-1]

    def _advance(self, token: int, start: int) -> None:
        """One token through the file, its logits not handed out (the default hands them out and drops them)."""
        self._forward_last([token], start)

    def prefill(self, ids: Sequence[int]) -> Any:
        return self._begin(ids, self._forward)

    def first(self, ids: Sequence[int]) -> Any:
        return self._begin(ids, self._forward_last)

    def _begin(self, ids: Sequence[int], forward: Callable[[list[int], int], Any]) -> Any:
        from mobilize.core.errors import ConfigError

        ids = [int(t) for t in ids]
        if not 1 <= len(ids) < self.max_len:
            raise ConfigError(f"a prompt of {len(ids)} tokens: prefill takes 1 to {self.max_len - 1}")
        self._pos = None  # a prefill that fails leaves no half-started sequence behind
        self._start()
        logits = forward(ids, 0)
        self._pos = len(ids)
        return logits

    def decode(self, token: int) -> Any:
        self._room()
        logits = self._forward_last([int(token)], self._pos)
        self._pos += 1
        return logits

    def step(self, token: int) -> None:
        self._room()
        self._advance(int(token), self._pos)
        self._pos += 1

    def _room(self) -> None:
        if self._pos is None or self._pos >= self.max_len:
            from mobilize.core.errors import ConfigError

            raise ConfigError(self.not_started if self._pos is None else
                              f"the KV cache is full ({self.max_len} tokens)")


@dataclasses.dataclass(frozen=True)
class DecoderVariant:
    name: str
    """``executorch-8da4w``: unique across engines; a variant of the ``generation`` plan."""
    engine: str
    weights: str
    """``fp32``, ``int8`` or ``int4``: what the weights are stored as (the bandwidth bound reads the file)."""
    promise: Promise
    build: Callable[[Path, Path], Path]
    """(saved model folder, output folder) -> the file (or folder) to open; the field's own tool does the work."""
    load: Callable[[Path, int, int], DecoderSession]
    """(file, threads, max_len) -> a session (the session class itself, called with them)."""
    packages: tuple[str, ...] = ()
    """Python packages it needs (a missing one: the variant is listed with the reason, not run)."""
    how: str = ""
    """One line naming the tool and scheme (``torchao 8da4w, group 32, XNNPACK, static KV cache``)."""
    available: Callable[[], str | None] = lambda: None
    """Why it cannot run here beyond a missing package (``packages`` are checked first, by whoever runs it), or
    None."""
    groups: tuple[int, ...] = ()
    """int4 group sizes (weights per scale) its tool offers, coarsest first: tune's ladder (``NAME@gN`` builds the
    file with group N; ``build`` then takes ``group=N``).  Empty: no group to choose (fp32, per-channel int8)."""
    group: int | None = None
    """The group this variant is built with when named ``NAME@gN`` (None: the engine's stock group)."""
    bytes_read: Callable[[Path], int] | None = None
    """What decoding one token reads of the built file's weights, from the file itself (a format that lists each
    tensor's stored size: GGUF); None: from the model's shapes and ``weights``
    (:func:`mobilize.bench.bandwidth.bytes_per_token`)."""
    session_loads_transformers: bool = False
    """Its session runs the transformers model itself (eager): compare forks its check from the server that has
    transformers imported (:data:`mobilize.pipeline.process.DECODER_PRELOAD`); every other engine's check does not
    import it and is forked without it."""
    runtime: tuple[str, ...] = ()
    """The modules its session imports to run a file: a process holding them alone is the runtime's bare baseline,
    which the file's memory footprint is measured over (:mod:`mobilize.generation.footprint`)."""
    float_sibling: str | None = None
    """The float file the same tool makes without quantizing (``onnx-genai-int4`` -> ``onnx-genai-fp32``): where
    both run, an export error that file shows against the float model is named on this one too (rule
    ``float-sibling``: :func:`mobilize.accuracy.decoder_verdict.judge_siblings`), not charged to quantization.  None:
    the tool makes no float file here (llama.cpp's f16 is its nearest; a peer's CLI file)."""
    slow_build: bool = False
    """Its tool takes minutes at a real size (torch.export and a lowering: ExecuTorch's XNNPACK partitions took 326 s
    of fake-tensor passes at Qwen2.5-0.5B's shape, litert-torch's signatures 296 s): compare builds such files
    after the others, so the quick files' checks run beside them instead of waiting."""
    groups_pad: bool = False
    """Its tool pads a linear whose in-features a group does not divide (ONNX Runtime's MatMulNBits blocks), so every
    group it offers fits every model; else a group that does not divide some linear is left off tune's ladder (the
    tool would fall back to per channel, refuse, or change the group for that layer)."""

    def build_file(self, folder: Path, out_dir: Path) -> Path:
        """Build with the chosen group (``NAME@gN``) or the engine's stock setting."""
        return self.build(folder, out_dir, **({"group": self.group} if self.group else {}))
