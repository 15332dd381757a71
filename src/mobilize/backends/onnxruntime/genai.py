"""ONNX Runtime decoders as ONNX Runtime's own generation stack makes them: onnxruntime-genai's model builder
(``python -m onnxruntime_genai.models.builder -i FOLDER -o OUT -p int4 -e cpu``) writes ``model.onnx`` with
GroupQueryAttention over a KV buffer shared between past and present, fused QKV, SkipLayerNorm and MatMulNBits, plus
``genai_config.json`` and the tokenizer; the file is run by onnxruntime-genai's own ``Generator`` (the cache stays
inside it, never copied through Python).

    >>> INT4.name, INT4_MIXED.weights, FP32.promise
    ('onnx-genai-int4', 'int4', <Promise.FLOAT: 'float'>)

The builder's int4 default on CPU quantizes every MatMul and the tied embedding table to int4 (round to nearest,
block 32) and runs MatMulNBits at accuracy level 4 (each activation row quantized to int8).  ``onnx-genai-int4-mixed``
is the builder's ``algo_config=k_quant_mixed``: k-quant rounding, the last MatMul (the head) and the layers llama.cpp's
mix also protects (the first and last eighth, every third layer's qkv/v/down projections) in int8.  On zoo:tiny_lm
(Zen 4, 1 thread) the default cost +1.18% perplexity and the mix +0.16% at the same time per token; keeping the
activations float (accuracy level 1) instead had bought nothing (+1.15%) at 1.85x the time, so it is not offered.  The builder
takes the architectures it knows (Llama, Mistral, Qwen, Phi, Gemma, ...); another one (GPT-2, OPT) is refused in one
line with the builder's own reason, and the torch.onnx-exported ``onnx-fp32``/``onnx-int4`` still take it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mobilize.backends.onnxruntime.complete import check_onnx
from mobilize.core.decoder import CachedDecoderSession, DecoderVariant, Promise
from mobilize.core.errors import ConfigError, UnsupportedByEngineError, UnsupportedModelError, headline, tool_reason, \
    translate_errors
from mobilize.core.packages import require
from mobilize.lowering.causal_lm import window_refusal

PACKAGES = ("onnxruntime_genai", "onnxruntime", "transformers", "onnx")
BLOCK = 32
"""The builder's default int4 block (weights per scale)."""
CONFIG = "genai_config.json"


def build(folder: Path, out_dir: Path, precision: str, extra: dict[str, Any] | None = None,
          group: int | None = None) -> Path:
    """Run the builder on the saved folder into ``out_dir/genai`` (the folder is what a GenAI app opens)."""
    require(PACKAGES, "the onnxruntime-genai decoder")
    config = json.loads((Path(folder) / "config.json").read_text())
    why = window_refusal(config, "onnxruntime-genai's model builder")
    if why:
        raise UnsupportedByEngineError(why)
    heads = config.get("num_attention_heads") or 1
    head_size = config.get("head_dim") or (config.get("hidden_size") or 0) // heads
    if head_size % 16:
        raise UnsupportedByEngineError(f"ONNX Runtime's GroupQueryAttention on CPU takes head sizes that are "
                                       f"multiples of 16; this model's is {head_size}")
    out = Path(out_dir) / "genai"
    options = {**(extra or {}), **({"block_size": group} if group else {})}
    with tempfile.TemporaryDirectory(prefix="mobilize-genai-") as cache:
        argv = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(folder), "-o", str(out), "-p",
                precision, "-e", "cpu", "-c", cache,
                *(["--extra_options", *[f"{k}={v}" for k, v in options.items()]] if options else [])]
        done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0 or not (out / "model.onnx").is_file():
        why = tool_reason(done.stderr + done.stdout).replace(f"The {folder} model", f"The {_architecture(config)} "
                                                               f"model")  # its refusal names the folder, not the class
        raise UnsupportedByEngineError(f"onnxruntime-genai's model builder cannot take this model: {why}")
    _drop_end_ids_past_the_vocabulary(out / CONFIG)
    return out


def _architecture(config: dict[str, Any]) -> str:
    """The model's class as its config names it (``GPT2LMHeadModel``), else its model_type."""
    names = config.get("architectures") or []
    return str(names[0]) if names else str(config.get("model_type") or "this")


def _drop_end_ids_past_the_vocabulary(path: Path) -> None:
    """The builder adds the tokenizer's end token to the model's end ids; a tokenizer that names none gave an id
    past the vocabulary (its size), which the Generator refuses at load ("eos_token_id (192) must be in range").
    Such ids are dropped from genai_config.json; the model's own end ids stay."""
    config = json.loads(path.read_text())
    model = config["model"]
    ids = model.get("eos_token_id")
    vocab = int(model.get("vocab_size") or 0)
    if isinstance(ids, list) and vocab and any(int(i) >= vocab for i in ids):
        kept = [int(i) for i in ids if int(i) < vocab]
        model["eos_token_id"] = kept if len(kept) != 1 else kept[0]
        path.write_text(json.dumps(config, indent=4))


def build_fp32(folder: Path, out_dir: Path) -> Path:
    return build(folder, out_dir, "fp32")


def build_int4(folder: Path, out_dir: Path, group: int | None = None) -> Path:
    return build(folder, out_dir, "int4", group=group)


def build_int4_mixed(folder: Path, out_dir: Path, group: int | None = None) -> Path:
    return build(folder, out_dir, "int4", {"algo_config": "k_quant_mixed"}, group=group)


class GenaiDecoderSession(CachedDecoderSession):
    """A builder's folder opened by onnxruntime-genai: one ``Model`` (its ONNX Runtime session on ``threads``
    threads), a fresh ``Generator`` (greedy, ``max_len`` tokens) for each sequence; every step's logits read from the
    model's ``logits`` output."""

    def __init__(self, path: Path, threads: int, max_len: int):
        require(PACKAGES[:2], "the onnxruntime-genai decoder")
        import onnxruntime_genai as og

        self.og = og
        self.path = Path(path)
        folder = self.path if self.path.is_dir() else self.path.parent
        if not (folder / CONFIG).is_file():
            raise UnsupportedModelError(f"{self.path} is not an onnxruntime-genai model folder (no {CONFIG})")
        try:
            described = json.loads((folder / CONFIG).read_text())["model"]
            context = described.get("context_length")
            onnx_file = folder / str(described.get("decoder", {}).get("filename", "model.onnx"))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UnsupportedModelError(f"{folder / CONFIG} cannot be read as onnxruntime-genai's config: "
                                        f"{headline(exc)[:200]}") from None
        if context and max_len > int(context):
            raise ConfigError(f"{folder.name} was built for {context} tokens, not {max_len}",
                              hint=f"keep the prompt and the tokens generated under {context}")
        if onnx_file.is_file():  # a cut weights file: onnxruntime-genai's own message is a C++ source-path dump
            check_onnx(onnx_file)
        # onnxruntime-genai's 1DS telemetry is on by default and writes a session file (.ses) into TMPDIR at every
        # model load; mobilize never asks for telemetry (a user who set the variable keeps their choice)
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        what = f"onnxruntime-genai could not load {folder}"
        with translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what}: {headline(exc)[:300]}"):
            config = og.Config(str(folder))
            config.overlay(json.dumps({"model": {"decoder": {"session_options": {
                "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
            self.model = og.Model(config)
        self.max_len, self.threads = max_len, threads
        self.generator: Any = None
        self.notes: list[str] = []

    def _start(self) -> None:
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(max_length=self.max_len, do_sample=False)
        self.generator = self.og.Generator(self.model, params)

    def _forward(self, ids: list[int], start: int) -> Any:
        import numpy as np

        self.generator.append_tokens(np.asarray([ids], dtype=np.int32))
        logits = self.generator.get_output("logits")
        return np.asarray(logits[0, -len(ids):], dtype=np.float32)

    last_position = ("onnxruntime-genai's Generator hands out the last position's logits (get_logits, as its own "
                     "loop reads them); the builder's graph computes the head at every prompt position")

    def _forward_last(self, ids: list[int], start: int) -> Any:
        import numpy as np

        self.generator.append_tokens(np.asarray([ids], dtype=np.int32))
        return np.asarray(self.generator.get_logits()[0], dtype=np.float32).reshape(-1)

    def _advance(self, token: int, start: int) -> None:
        import numpy as np

        self.generator.append_tokens(np.array([[token]], dtype=np.int32))

    def close(self) -> None:
        self.generator = self.model = None


_HOW = ("onnxruntime-genai's model builder (GroupQueryAttention, a KV buffer shared by past and present, fused QKV), "
        "run by its Generator")

FP32 = DecoderVariant(
    runtime=("onnxruntime_genai",),
    name="onnx-genai-fp32", engine="onnxruntime", weights="fp32", promise=Promise.FLOAT,
    build=build_fp32, load=GenaiDecoderSession, packages=PACKAGES, how=f"float32, {_HOW}",
)
INT4 = DecoderVariant(
    runtime=("onnxruntime_genai",),
    name="onnx-genai-int4", engine="onnxruntime", weights="int4", promise=Promise.QUANTIZED,
    float_sibling="onnx-genai-fp32",
    build=build_int4, load=GenaiDecoderSession, packages=PACKAGES, groups=(128, 64, 32, 16), groups_pad=True,
    how=f"the builder's CPU default: MatMulNBits int4 (symmetric, block {BLOCK}, round to nearest) for every MatMul "
        f"and the tied embedding table, int8 activations in the matmuls (accuracy level 4), {_HOW}",
)
INT4_MIXED = DecoderVariant(
    runtime=("onnxruntime_genai",),
    name="onnx-genai-int4-mixed", engine="onnxruntime", weights="int4", promise=Promise.QUANTIZED,
    float_sibling="onnx-genai-fp32",
    build=build_int4_mixed, load=GenaiDecoderSession, packages=PACKAGES, groups=(128, 64, 32, 16),
    groups_pad=True,
    how=f"the builder's algo_config=k_quant_mixed: k-quant int4 (block {BLOCK}), the head and llama.cpp's "
        f"sensitive layers int8, {_HOW}",
)
