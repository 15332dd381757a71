"""LiteRT decoders: a transformers Llama, Mistral or Qwen2 re-authored and converted by litert-torch's generative
path (see :mod:`mobilize.backends.litert.decoder_convert`; other architectures are refused, UNSUPPORTED) into one
``.tflite`` with ``prefill_<L>`` and ``decode`` signatures and the KV cache as their inputs and outputs, run by
ai-edge-litert's ``CompiledModel`` (XNNPACK) in float32 (``litert-fp32``) or with litert-torch's
``dynamic_int4_block32`` recipe: int4 weights, one scale per 32 input features, activations quantized on the fly
(``litert-int4``).

    >>> FP32.name, INT4.weights, INT4.promise
    ('litert-fp32', 'int4', <Promise.QUANTIZED: 'quantized'>)

Prefill lengths are fixed when the file is written.  A prompt of ``n`` tokens runs through the smallest exported
length ``L >= n``, padded: positions ``n..L-1`` are computed and written to the cache, but the causal mask hides
them from every earlier position, and the decode steps that follow overwrite them one by one before any query can
see them.  A prompt longer than every length runs in windows of the largest, ``L``, at positions ``0, L, 2L, ...``;
the last window ends at ``n`` and so may start inside the one before, which recomputes a few positions with the
same cache, the same values.  No window reaches past the cache, so no cache write is clamped.  The session binds
one set of cache buffers as each call's inputs and outputs: the cache stays in place.
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
    """A generative ``.tflite`` in LiteRT's ``CompiledModel`` (its CPU accelerator: XNNPACK) with ``threads`` threads.

    The cache lives in one set of LiteRT buffers, each bound as both the input and the output of its name in every
    call: the file's own cache-update ops write each call's new positions in place.  Through the interpreter's
    signature runner the whole cache was copied in and out through Python at every token (48 arrays, 25 MB for
    Qwen2.5-0.5B's shape at 1024 positions: 7.4 of 42.6 ms per token on a 2-core AVX2 EPYC), and the runner exposes
    no buffer of a signature to bind instead.  The logits are the one copy out."""

    def __init__(self, path: Path, threads: int, max_len: int):
        import numpy as np

        from mobilize.backends.litert.runtime import quiet_native_output

        require(RUN_PACKAGES, "the LiteRT decoder")
        self.path = Path(path)
        with translate_errors(UnsupportedModelError, f"LiteRT could not load {self.path}"), quiet_native_output():
            self.model = _compiled(self.path, threads)
            signatures = self.model.get_signature_list()
            if "decode" not in signatures:
                raise UnsupportedModelError(f"{self.path.name} has no 'decode' signature: not a litert-torch "
                                            f"generative decoder (signatures: {', '.join(signatures)})")
            self._kv = {n: self.model.create_input_buffer_by_name("decode", n)
                        for n in signatures["decode"]["inputs"] if n.startswith("kv_cache_")}
            self._io = {name: _SignatureIO(self.model, name, self._kv) for name in signatures
                        if name == "decode" or _PREFILL.match(name)}
        details = next(iter(self._kv.values())).get_tensor_details()
        shape = details["shape"]
        self._empty = np.zeros(shape, details["dtype"])
        built = int(shape[1])  # [batch, cache positions, kv heads, head dim]
        if max_len > built:
            raise ConfigError(f"{self.path.name} holds {built} tokens in its KV cache, not {max_len}",
                              hint=f"keep the prompt and the tokens generated under {built}")
        self._prefill = {int(m.group(1)): name for name in self._io if (m := _PREFILL.match(name))}
        if not self._prefill:
            raise UnsupportedModelError(f"{self.path.name} has no prefill_<length> signature")
        self.prefill_lens = tuple(sorted(self._prefill))
        """The prompt lengths the file has a prefill signature for."""
        self.max_len = max_len
        self.threads = threads

    def _run(self, signature: str, tokens: Sequence[int], start: int) -> Any:
        """Run one signature on ``tokens`` at positions ``start...``, the cache updated in place; its logits."""
        io = self._io[signature]
        io.feed(tokens, start)
        self.model.run_by_name(signature, io.run_inputs, io.run_outputs)
        return io.logits()

    def _start(self) -> None:
        for buffer in self._kv.values():
            buffer.write(self._empty)

    def _forward(self, ids: list[int], start: int) -> Any:
        """A prompt (from position 0) through the prefill signatures; one token after it through ``decode``."""
        return self._prompt(ids) if start == 0 else self._run("decode", ids, start)

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
        self.model = None
        self._io, self._kv = {}, {}


def _compiled(path: Path, threads: int) -> Any:
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.cpu_options import CpuOptions
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import Options

    return CompiledModel.from_file(str(path), options=Options(hardware_accelerators=HardwareAccelerator.CPU,
                                                              cpu_options=CpuOptions(num_threads=threads)))


class _SignatureIO:
    """One signature's own buffers - its token ids and positions in, its logits out - and the maps a call binds:
    those with the session's cache buffers ``kv``, each both an input and an output."""

    def __init__(self, model: Any, signature: str, kv: dict[str, Any]):
        self.inputs = {n: model.create_input_buffer_by_name(signature, n) for n in ("tokens", "input_pos")}
        self.outputs = {"logits": model.create_output_buffer_by_name(signature, "logits")}
        self.run_inputs, self.run_outputs = {**self.inputs, **kv}, {**self.outputs, **kv}
        self.shape = [int(d) for d in self.outputs["logits"].get_tensor_details()["shape"]]  # [1, length, vocab]

    def feed(self, tokens: Sequence[int], start: int) -> None:
        import numpy as np

        self.inputs["tokens"].write(np.asarray([list(tokens)], np.int32))
        self.inputs["input_pos"].write(np.arange(start, start + len(tokens), dtype=np.int32))

    def logits(self) -> Any:
        import numpy as np

        return self.outputs["logits"].read(int(np.prod(self.shape)), np.float32).reshape(self.shape[1:])


_RUN = ("litert-torch generative conversion (Llama, Mistral or Qwen2 re-authored, prefill_<L> + decode signatures, "
        "external KV cache), ai-edge-litert CompiledModel with XNNPACK, the cache bound in place")

FP32 = DecoderVariant(
    slow_build=True,
    runtime=("ai_edge_litert.compiled_model",),
    name="litert-fp32", engine="litert", weights="fp32", promise=Promise.FLOAT,
    build=build_fp32, load=LiteRTDecoderSession, packages=BUILD_PACKAGES,
    how=f"float32, {_RUN}",
)
INT4 = DecoderVariant(
    slow_build=True,
    runtime=("ai_edge_litert.compiled_model",),
    name="litert-int4", engine="litert", weights="int4", promise=Promise.QUANTIZED,
    float_sibling="litert-fp32",
    build=build_int4, load=LiteRTDecoderSession, packages=BUILD_PACKAGES, groups=(128, 32),
    how=f"litert-torch dynamic_int4_block32 (int4 weights, block 32 (tune: 128, 32), dynamic int8 activations), {_RUN}",
)
