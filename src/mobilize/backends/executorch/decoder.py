"""ExecuTorch decoders: a transformers causal LM as one ``.pte`` with a static KV cache inside the program, updated
and read by ExecuTorch's LLM custom ops (``llama::update_cache``, ``llama::custom_sdpa``), linears on XNNPACK, in
float32 (``executorch-fp32``) or torchao 8da4w (``executorch-8da4w``); run through ExecuTorch's Python runtime with
its threadpool sized to the session's threads.  :mod:`.decoder_export` builds the program.

    >>> FP32.name, INT4_8DA4W.weights, INT4_8DA4W.promise
    ('executorch-fp32', 'int4', <Promise.QUANTIZED: 'quantized'>)

A prefill restarts at position 0 without reloading the method: ``update_cache`` overwrites the positions it runs and
``custom_sdpa`` reads only the positions before the current one, so the previous sequence is never read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mobilize.core.decoder import CachedDecoderSession, DecoderVariant, Promise
from mobilize.core.packages import require
from mobilize.core.peers import OPTIMUM_EXECUTORCH
from mobilize.core.errors import ConfigError, UnsupportedModelError, translate_errors

FLOAT_PACKAGES = ("executorch", "transformers")
QUANT_PACKAGES = FLOAT_PACKAGES + ("torchao",)


def _build(folder: Path, out_dir: Path, quantize: bool, group: int | None = None) -> Path:
    """Load the saved model, quantize it (8da4w) when asked, and write its .pte into ``out_dir``."""
    from mobilize.backends.executorch.decoder_export import GROUP, check_custom_attention, check_supported, \
        program_bytes, quantize_8da4w
    from mobilize.lowering.decoder import conv1d_as_linear, load_hf_decoder

    require(QUANT_PACKAGES if quantize else FLOAT_PACKAGES, "the ExecuTorch decoder")
    name = "model-fp32.pte"
    with translate_errors(UnsupportedModelError, f"ExecuTorch could not export the decoder in {folder}"):
        model = load_hf_decoder(folder)
        check_supported(model.config)  # a refusal before any quantization
        check_custom_attention(model)  # on the float model (why: check_custom_attention)
        if quantize:
            conv1d_as_linear(model)  # GPT-2's projections are Conv1D: as linears, torchao quantizes them
            got = quantize_8da4w(model, group or GROUP)
            name = f"model-8da4w-{f'g{got}' if got else 'perchannel'}.pte"  # the file says which
        data = program_bytes(model, checked=True)
    out = Path(out_dir) / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return out


def build_fp32(folder: Path, out_dir: Path) -> Path:
    return _build(folder, out_dir, quantize=False)


def build_8da4w(folder: Path, out_dir: Path, group: int | None = None) -> Path:
    return _build(folder, out_dir, quantize=True, group=group)


OPTIMUM_ARGS = ("--task", "text-generation", "--recipe", "xnnpack", "--use_custom_sdpa", "--use_custom_kv_cache",
                "--qlinear", "8da4w", "--qembedding", "8w")
"""optimum-executorch's README command for a causal LM on XNNPACK, unchanged."""


def build_optimum_8da4w(folder: Path, out_dir: Path) -> Path:
    """``optimum-cli export executorch`` (its own venv: :mod:`mobilize.core.peers`) with its README's flags and
    the cache length mobilize's own file holds; its ``model.pte`` has the same ``forward(input_ids, cache_position)``
    and ``get_max_seq_len`` as mobilize's, so :class:`ExecuTorchDecoderSession` runs it."""
    from transformers import AutoConfig

    from mobilize.backends.executorch.decoder_export import cache_len

    length = cache_len(AutoConfig.from_pretrained(str(folder)))
    return OPTIMUM_EXECUTORCH.export(["executorch", "--model", str(Path(folder).resolve()), *OPTIMUM_ARGS,
                                      "--max_seq_len", str(length), "--output_dir"], Path(out_dir), "model.pte")


class ExecuTorchDecoderSession(CachedDecoderSession):
    """A decoder ``.pte`` loaded in ExecuTorch's Python runtime; the cache lives in the program's buffers."""

    def __init__(self, path: Path, threads: int, max_len: int):
        from mobilize.backends.executorch.runtime import _OPEN, _size_pool

        require(FLOAT_PACKAGES, "the ExecuTorch decoder")
        self.path = Path(path)
        _size_pool(threads)  # before loading: XNNPACK binds a program to the pool it finds
        self.threads = threads
        self.module: Any = None
        self._reload()
        if "get_max_seq_len" not in self._program.method_names:
            raise UnsupportedModelError(f"{self.path.name} is no decoder file: its program has no get_max_seq_len "
                                        f"method (methods: {', '.join(sorted(self._program.method_names))})",
                                        hint="give a .pte that mobilize compare or optimize built for a causal LM, or "
                                             "bench it without --task generation")
        built = int(self._program.load_method("get_max_seq_len").execute([])[0])
        if max_len > built:
            raise ConfigError(f"{self.path.name} holds {built} tokens in its KV cache; this run needs {max_len}",
                              hint=f"keep the prompt and the tokens generated under {built}")
        self.max_len = max_len
        _OPEN.add(self)  # a later threadpool resize reloads this program too (see runtime.py)

    def _reload(self) -> None:
        """(Re)load the program onto the current threadpool; the cache starts empty, so a prefill must come next."""
        from mobilize.backends.executorch.pte import past_heavy_inits
        from mobilize.backends.executorch.runtime import portable_lib, quiet_native_stderr

        path = str(self.path)
        portable_lib()
        with translate_errors(UnsupportedModelError, f"ExecuTorch could not load {path}"), quiet_native_stderr():
            with past_heavy_inits():  # executorch.runtime imports portable_lib's wrapper: exir's __init__, ~3 s
                import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (the llama:: kernels)
                import executorch.kernels.quantized  # noqa: F401  (quantized_decomposed::embedding_byte: the 8-bit
                # embedding table of the 8da4w files, mobilize's and optimum-executorch's)
                from executorch.runtime import Runtime

            self._program = Runtime.get().load_program(path)
            self.module = self._program.load_method("forward")
        self._pos = None

    not_started = "decode before prefill (or after the threadpool was resized): prefill first"

    def _start(self) -> None:
        """Nothing to empty: the static cache is written from position 0 on, and attention reads only the positions
        before the current one (custom_sdpa's ``start_pos``)."""

    def _forward(self, ids: list[int], start: int) -> Any:
        import numpy as np
        import torch

        tokens = torch.tensor([ids], dtype=torch.long)
        logits = self.module.execute([tokens, torch.arange(start, start + len(ids), dtype=torch.long)])[0]
        return np.asarray(logits[0].numpy(), dtype=np.float32)

    def close(self) -> None:
        from mobilize.backends.executorch.runtime import _OPEN

        _OPEN.discard(self)
        self.module = self._program = None


RUNTIME = ("torch", "executorch.runtime", "executorch.extension.llm.custom_ops.custom_ops",
           "executorch.kernels.quantized")
"""What the session imports to run a .pte (torch: its inputs are torch tensors; the custom and quantized kernels)."""

_CACHE = "ExecuTorch custom SDPA/KV-cache ops, static KV cache (max_position_embeddings, at most 1024 tokens)"

FP32 = DecoderVariant(
    slow_build=True,
    runtime=RUNTIME,
    name="executorch-fp32", engine="executorch", weights="fp32", promise=Promise.FLOAT,
    build=build_fp32, load=ExecuTorchDecoderSession, packages=FLOAT_PACKAGES,
    how=f"ExecuTorch XNNPACK float32, {_CACHE}",
)
INT4_8DA4W = DecoderVariant(
    slow_build=True,
    runtime=RUNTIME,
    name="executorch-8da4w", engine="executorch", weights="int4", promise=Promise.QUANTIZED,
    float_sibling="executorch-fp32",
    build=build_8da4w, load=ExecuTorchDecoderSession, packages=QUANT_PACKAGES, groups=(128, 64, 32),
    how=f"torchao 8da4w (int8 dynamic activations, int4 weights group 32 (tune: 128, 64, 32), per channel where the "
        f"group does not divide the "
        f"in-features; the embedding table int8 per row, as optimum-executorch's --qembedding 8w), XNNPACK, {_CACHE}",
)
OPTIMUM_8DA4W = DecoderVariant(
    slow_build=True,
    runtime=RUNTIME,
    name="optimum-executorch-8da4w", engine="executorch", weights="int4", promise=Promise.QUANTIZED,
    build=build_optimum_8da4w, load=ExecuTorchDecoderSession, packages=FLOAT_PACKAGES, available=OPTIMUM_EXECUTORCH.available,
    how="a peer's file: optimum-executorch's CLI (`optimum-cli export executorch --recipe xnnpack --use_custom_sdpa "
        "--use_custom_kv_cache --qlinear 8da4w --qembedding 8w`, its own venv), run by mobilize's ExecuTorch session",
)
