"""llama.cpp decoders: a saved transformers causal LM converted to GGUF by llama.cpp's own converter (float32), then
quantized by llama.cpp's own quantizer (``llama_model_quantize``, the function ``llama-quantize`` runs) to F16, Q8_0,
Q4_0 or Q4_K_M - llama.cpp's documented route (convert, then quantize) - and run through libllama's C API
(llama-cpp-python's ctypes bindings, no Python-side token loop of its own) with its KV cache.

    >>> Q4_K_M.name, Q4_K_M.weights, F16.promise
    ('llamacpp-q4_k_m', 'int4', <Promise.QUANTIZED: 'quantized'>)

Every file is judged as quantized: even F16 rounds the weights, and llama.cpp keeps its KV cache in f16 (its
default, what an app gets).  A mix like Q4_K_M stores some tensors at higher precision by design (llama.cpp's choice,
not a fallback), and a K-quant needs rows that are a multiple of 256: other rows fall back to another type
(Q4_K -> Q5_0).  The session reads what each tensor really is from the file and says it in a note.
"""

from __future__ import annotations

import collections
import ctypes
import json
import tempfile
from pathlib import Path
from typing import Any

from mobilize.backends.llamacpp.convert import available, convert
from mobilize.core.decoder import CachedDecoderSession, DecoderVariant, Promise
from mobilize.core.errors import ConfigError, UnsupportedByEngineError, UnsupportedModelError
from mobilize.lowering.causal_lm import window_refusal

PACKAGES = ("transformers",)
"""What pip alone installs; llama-cpp-python and gguf-py come from scripts/setup-llamacpp.sh (``available`` says)."""
FTYPES = {"f16": "LLAMA_FTYPE_MOSTLY_F16", "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
          "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}
"""Variant suffix -> llama.cpp's file type (the name ``llama-quantize`` takes, upper-cased)."""
MIX_TYPES = {"q4_k_m": {"Q4_K", "Q6_K", "Q5_K"}}
"""Tensor types a mix uses by design (not fallbacks)."""


LOG: collections.deque[str] = collections.deque(maxlen=200)
"""libllama's latest log lines (kept off the terminal: llama.cpp logs every load); a refusal quotes its last error."""
_LOG_LEVEL_ERROR = 4  # GGML_LOG_LEVEL_ERROR


def _quiet() -> Any:
    """Route libllama's log into :data:`LOG`; returns the callback (kept alive for the process)."""
    import llama_cpp

    @llama_cpp.llama_log_callback
    def keep(level: int, text: bytes, user_data: Any) -> None:
        line = text.decode("utf-8", errors="replace").strip()
        if line:
            LOG.append(f"{'error: ' if level == _LOG_LEVEL_ERROR else ''}{line}")

    llama_cpp.llama_log_set(keep, ctypes.c_void_p(0))
    return keep


def first_error() -> str:
    """libllama's first error line since the log was last read (the cause; the lines after it say what failed
    because of it), or empty; the log is emptied."""
    errors = [line[len("error: "):] for line in LOG if line.startswith("error: ")]
    LOG.clear()
    return errors[0][:300] if errors else ""


_LOG = None


def _library() -> Any:
    global _LOG
    import llama_cpp

    if _LOG is None:
        _LOG = _quiet()
        llama_cpp.llama_backend_init()
    return llama_cpp


def amx_compiled(system_info: str) -> bool:
    """Whether libllama was built with ggml's AMX kernels, from its own ``llama_print_system_info()`` line (``AMX_INT8
    = 1`` where ``__AMX_INT8__`` was defined at build time: a GGML_NATIVE build on a CPU with AMX).

        >>> amx_compiled("CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |")
        True
        >>> amx_compiled("CPU : SSE3 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | REPACK = 1 |")
        False
    """
    return any(part.strip().replace(" ", "") == "AMX_INT8=1" for part in system_info.split("|"))


AMX_NOTE = ("llamacpp: this libllama was built with ggml's AMX kernels, whose weight buffers crash quantized GGUF files "
            "with this llama.cpp (llama.cpp issue #20824, PR #26954): the file is loaded without llama.cpp's extra "
            "buffer types (no AMX, no repacked weights: slower than llama.cpp at its best here); "
            "scripts/setup-llamacpp.sh builds a libllama without AMX that keeps the AVX-512 repack path")
"""Said on every file loaded by an AMX build (one llama-cpp-python wheel was not built by setup-llamacpp.sh)."""


def quantize(source: Path, out: Path, kind: str, threads: int = 0) -> Path:
    """``llama_model_quantize(source, out, ftype)`` with llama.cpp's default parameters."""
    lib = _library()
    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, FTYPES[kind])
    params.nthread = threads
    if lib.llama_model_quantize(str(source).encode(), str(out).encode(), ctypes.byref(params)) != 0 or \
            not out.is_file():
        raise UnsupportedByEngineError(f"llama.cpp's quantizer could not write {kind.upper()} from {source.name}")
    return out


def _build(folder: Path, out_dir: Path, kind: str) -> Path:
    why = available()
    if why:
        raise UnsupportedModelError(why)
    refused = window_refusal(json.loads((Path(folder) / "config.json").read_text()), "llama.cpp's converter")
    if refused:
        raise UnsupportedByEngineError(refused)
    out = Path(out_dir) / f"model-{kind.upper()}.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mobilize-gguf-") as tmp:
        f32 = convert(Path(folder), Path(tmp) / "model-F32.gguf", "f32")
        quantize(f32, out, kind)
    return out


def build_f16(folder: Path, out_dir: Path) -> Path:
    return _build(folder, out_dir, "f16")


def build_q8_0(folder: Path, out_dir: Path) -> Path:
    return _build(folder, out_dir, "q8_0")


def build_q4_0(folder: Path, out_dir: Path) -> Path:
    return _build(folder, out_dir, "q4_0")


def build_q4_k_m(folder: Path, out_dir: Path) -> Path:
    return _build(folder, out_dir, "q4_k_m")


def bytes_read(path: Path) -> int:
    """What decoding one token reads of a GGUF file's weights, from its tensors' stored sizes: every weight matrix
    whole, the token embedding table one row (a gather) unless it is also the output head (no ``output.weight``: a
    tied table, read whole once), the 1-D tensors (norms) whole."""
    from gguf import GGUFReader

    tensors = GGUFReader(str(path)).tensors
    tied = not any(t.name == "output.weight" for t in tensors)
    total = 0
    for t in tensors:
        size = int(t.n_bytes)
        if t.name == "token_embd.weight" and not tied:
            size //= int(t.shape[-1])  # gguf lists shapes innermost first: rows are the last dimension
        total += size
    return total


def describe(path: Path) -> str:
    """One line: the types the file's weight matrices are stored as, the K-quant fallbacks named (a K-quant block
    holds 256 weights of a row: a tensor whose rows are not a multiple of 256 gets another type)."""
    from gguf import GGUFReader

    matrices = [t for t in GGUFReader(str(path)).tensors if len(t.shape) > 1]
    types = collections.Counter(t.tensor_type.name for t in matrices)
    parts = ", ".join(f"{n} {t}" for t, n in types.most_common())
    uneven = sorted({int(t.shape[0]) for t in matrices if int(t.shape[0]) % 256})
    odd = collections.Counter(t.tensor_type.name for t in matrices if int(t.shape[0]) % 256)
    fallback = ""
    if uneven and any(name.endswith("_K") for name in types):
        fallback = (f"; rows of {', '.join(map(str, uneven))} are not a multiple of 256, so those "
                    f"{sum(odd.values())} are stored as {', '.join(sorted(odd))} (llama.cpp's K-quant fallback)")
    return f"llamacpp: {Path(path).name} stores its {len(matrices)} weight matrices as {parts}{fallback}"


class LlamaCppSession(CachedDecoderSession):
    """A GGUF file loaded by libllama: one context of ``max_len`` tokens, ``threads`` threads for prefill and
    decode, every position's logits returned (perplexity needs them), the KV cache emptied by each prefill."""

    not_started = "decode before prefill: prefill first (a GGUF session starts its sequence with a prefill)"

    def __init__(self, path: Path, threads: int, max_len: int):
        import numpy as np

        why = available()
        if why:
            raise UnsupportedModelError(why)
        lib = self.lib = _library()
        self.path = Path(path)
        self.max_len, self.threads = max_len, threads
        self.model = self.ctx = self.batch = None
        if not self.path.is_file():
            raise UnsupportedModelError(f"{self.path} is not a GGUF file (not a file)")
        with open(self.path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise UnsupportedModelError(f"{self.path} is not a GGUF file (no GGUF magic at its start)")
        mparams = lib.llama_model_default_params()
        self.notes = []
        if amx_compiled(lib.llama_print_system_info().decode(errors="replace")):
            mparams.use_extra_bufts = False  # the AMX buffer type comes first among the extra ones: all or none
            self.notes.append(AMX_NOTE)
        LOG.clear()
        self.model = lib.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self.model:
            raise UnsupportedModelError(f"libllama could not load {self.path}: "
                                        f"{first_error() or 'a truncated file, or an architecture it does not know'}")
        trained = int(lib.llama_model_n_ctx_train(self.model))
        if max_len > trained:
            self.close()
            raise ConfigError(f"{self.path.name} holds a model made for {trained} tokens, not {max_len}",
                              hint=f"keep the prompt and the tokens generated under {trained}")
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = max_len
        cparams.n_seq_max = 1
        cparams.n_threads = cparams.n_threads_batch = threads
        self.ctx = lib.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            self.close()
            raise UnsupportedModelError(f"libllama could not make a {max_len}-token context for {self.path.name}")
        self.vocab = int(lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model)))
        self.batch = lib.llama_batch_init(max_len, 0, 1)
        self._np = np
        self.notes.insert(0, describe(self.path))

    def _start(self) -> None:
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.ctx), True)

    last_position = "libllama computes the output head at the last prompt position only (its batch's logits flag)"

    def _forward(self, ids: list[int], start: int) -> Any:
        self._decode(ids, start, every=True)
        logits = self._np.ctypeslib.as_array(self.lib.llama_get_logits(self.ctx), shape=(len(ids) * self.vocab,))
        return logits.reshape(len(ids), self.vocab).copy()

    def _forward_last(self, ids: list[int], start: int) -> Any:
        """As llama.cpp's own loop starts and steps a sequence: the output head on the last token only."""
        self._decode(ids, start, every=False)
        row = self.lib.llama_get_logits_ith(self.ctx, len(ids) - 1)
        return self._np.ctypeslib.as_array(row, shape=(self.vocab,)).copy()

    def _advance(self, token: int, start: int) -> None:
        self._decode([token], start, every=False)

    def _decode(self, ids: list[int], start: int, every: bool) -> None:
        batch = self.batch
        batch.n_tokens = len(ids)
        for i, token in enumerate(ids):
            batch.token[i] = token
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = every or i == len(ids) - 1
        status = self.lib.llama_decode(self.ctx, batch)
        if status != 0:
            raise UnsupportedModelError(f"libllama's decode of {len(ids)} token(s) at position {start} returned "
                                        f"{status}")

    def close(self) -> None:
        lib = getattr(self, "lib", None)
        if lib is None:
            return
        if self.batch is not None:
            lib.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx:
            lib.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            lib.llama_model_free(self.model)
            self.model = None


_HOW = ("llama.cpp's convert_hf_to_gguf.py (f32) then its quantizer ({}), libllama CPU kernels, its f16 KV cache")


def _variant(kind: str, weights: str, build: Any) -> DecoderVariant:
    return DecoderVariant(name=f"llamacpp-{kind}", engine="llamacpp", weights=weights, promise=Promise.QUANTIZED,
                          runtime=("llama_cpp",), build=build, load=LlamaCppSession, packages=PACKAGES, how=_HOW.format(kind.upper()),
                          available=available, bytes_read=bytes_read)


F16 = _variant("f16", "fp16", build_f16)
Q8_0 = _variant("q8_0", "int8", build_q8_0)
Q4_0 = _variant("q4_0", "int4", build_q4_0)
Q4_K_M = _variant("q4_k_m", "int4", build_q4_k_m)
