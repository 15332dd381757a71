"""LiteRT decoders: a transformers Llama, Mistral or Qwen2 re-authored and converted by litert-torch's generative
path (see :mod:`mobilize.backends.litert.decoder_convert`; other architectures are refused, UNSUPPORTED) into one
``.tflite`` with ``prefill_<L>`` and ``decode`` signatures and the KV cache as their inputs and outputs, run by the
ai-edge-litert interpreter (XNNPACK) in float32 (``litert-fp32``) or with litert-torch's ``dynamic_int4_block32``
recipe: int4 weights, one scale per 32 input features, activations quantized on the fly (``litert-int4``).

    >>> FP32.name, INT4.weights, INT4.promise
    ('litert-fp32', 'int4', <Promise.QUANTIZED: 'quantized'>)

Prefill lengths are fixed when the file is written.  A prompt of ``n`` tokens runs through the smallest exported
length ``L >= n``, padded: positions ``n..L-1`` are computed and written to the cache, but the causal mask hides
them from every earlier position, and the decode steps that follow overwrite them one by one before any query can
see them.  A prompt longer than every length runs in windows of the largest, ``L``, at positions ``0, L, 2L, ...``;
the last window ends at ``n`` and so may start inside the one before, which recomputes a few positions with the
same cache, the same values.  No window reaches past the cache, so no cache write is clamped.  The session holds
the cache arrays the last call returned (each call copies them in and out).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from mobilize.core.decoder import CachedDecoderSession, DecoderVariant, Promise
from mobilize.core.packages import require
from mobilize.core.errors import ConfigError, UnsupportedModelError, translate_errors

BUILD_PACKAGES = ("torch", "transformers", "litert_torch", "ai_edge_litert")
RUN_PACKAGES = ("ai_edge_litert",)
_PREFILL = re.compile(r"prefill_(\d+)$")


def build_fp32(folder: Path, out_dir: Path) -> Path:
    from mobilize.backends.litert.decoder_convert import convert

    require(BUILD_PACKAGES, "the LiteRT decoder")
    return convert(Path(folder), Path(out_dir), "none")


def build_int4(folder: Path, out_dir: Path, group: int = 32) -> Path:
    from mobilize.backends.litert.decoder_convert import INT4_RECIPES, convert

    require(BUILD_PACKAGES, "the LiteRT decoder")
    return convert(Path(folder), Path(out_dir), INT4_RECIPES[group])


class LiteRTDecoderSession(CachedDecoderSession):
    """A generative ``.tflite`` in the ai-edge-litert interpreter with ``threads`` threads."""

    def __init__(self, path: Path, threads: int, max_len: int):
        import numpy as np

        from mobilize.backends.litert.runtime import quiet_native_output

        require(RUN_PACKAGES, "the LiteRT decoder")
        from ai_edge_litert.interpreter import Interpreter

        self.path = Path(path)
        with translate_errors(UnsupportedModelError, f"LiteRT could not load {self.path}"), quiet_native_output():
            self.interpreter = Interpreter(model_path=str(self.path), num_threads=threads)
            self.interpreter.allocate_tensors()  # the XNNPACK delegate's start-up line, here
            signatures = self.interpreter.get_signature_list()
            if "decode" not in signatures:
                raise UnsupportedModelError(f"{self.path.name} has no 'decode' signature: not a litert-torch "
                                            f"generative decoder (signatures: {', '.join(signatures)})")
            self._decode = self.interpreter.get_signature_runner("decode")
            self._prefill = {int(m.group(1)): self.interpreter.get_signature_runner(name)
                             for name in signatures if (m := _PREFILL.match(name))}
        details = self._decode.get_input_details()
        self._kv_names = [n for n in signatures["decode"]["inputs"] if n.startswith("kv_cache_")]
        self._empty = {n: np.zeros(details[n]["shape"], details[n]["dtype"]) for n in self._kv_names}
        built = int(details[self._kv_names[0]]["shape"][1])  # [batch, cache positions, kv heads, head dim]
        if max_len > built:
            raise ConfigError(f"{self.path.name} holds {built} tokens in its KV cache, not {max_len}",
                              hint=f"keep the prompt and the tokens generated under {built}")
        if not self._prefill:
            raise UnsupportedModelError(f"{self.path.name} has no prefill_<length> signature")
        self.prefill_lens = tuple(sorted(self._prefill))
        """The prompt lengths the file has a prefill signature for."""
        self.max_len = max_len
        self.threads = threads
        self._kv: dict[str, Any] = {}

    def _run(self, runner: Any, tokens: Sequence[int], start: int) -> Any:
        """Run one signature on ``tokens`` at positions ``start...``; keep the cache it returns; its logits."""
        import numpy as np

        out = runner(tokens=np.asarray([list(tokens)], np.int32),
                     input_pos=np.arange(start, start + len(tokens), dtype=np.int32), **self._kv)
        self._kv = {n: out[n] for n in self._kv_names}
        return np.asarray(out["logits"][0], dtype=np.float32)

    def _start(self) -> None:
        self._kv = dict(self._empty)

    def _forward(self, ids: list[int], start: int) -> Any:
        """A prompt (from position 0) through the prefill signatures; one token after it through ``decode``."""
        return self._prompt(ids) if start == 0 else self._run(self._decode, ids, start)

    def _prompt(self, ids: list[int]) -> Any:
        import numpy as np

        n = len(ids)
        fits = [length for length in self._prefill if length >= n]
        if fits:
            length = min(fits)
            return self._run(self._prefill[length], ids + [0] * (length - n), 0)[:n]
        length = max(self._prefill)
        parts, start = [], 0
        while start < n:
            begin = min(start, n - length)  # the last window ends at n
            part = self._run(self._prefill[length], ids[begin:begin + length], begin)
            parts.append(part[start - begin:])
            start = begin + length
        return np.concatenate(parts)


    def close(self) -> None:
        self.interpreter = self._decode = self._prefill = None
        self._kv = {}


_RUN = ("litert-torch generative conversion (Llama, Mistral or Qwen2 re-authored, prefill_<L> + decode signatures, "
        "external KV cache), ai-edge-litert interpreter with XNNPACK")

FP32 = DecoderVariant(
    name="litert-fp32", engine="litert", weights="fp32", promise=Promise.FLOAT,
    build=build_fp32, load=LiteRTDecoderSession, packages=BUILD_PACKAGES,
    how=f"float32, {_RUN}",
)
INT4 = DecoderVariant(
    name="litert-int4", engine="litert", weights="int4", promise=Promise.QUANTIZED,
    build=build_int4, load=LiteRTDecoderSession, packages=BUILD_PACKAGES, groups=(128, 32),
    how=f"litert-torch dynamic_int4_block32 (int4 weights, block 32 (tune: 128, 32), dynamic int8 activations), {_RUN}",
)
