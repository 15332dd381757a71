"""A transformers Llama, Mistral or Qwen2 folder -> a ``.tflite`` decoder with litert-torch's generative path: the
model re-authored with the Edge Generative API layers (``model_builder.build_decoder_only_model`` reads the folder's
weights by their transformers names), converted by ``converter.convert_to_tflite`` into one file with a ``prefill_<L>`` signature per
length in :func:`prefill_lens` and one ``decode`` signature, the KV cache an input and an output of each
(``kv_cache_k_<i>``/``kv_cache_v_<i>``, ``cache_len`` positions), the causal mask built inside.

    >>> prefill_lens(64), prefill_lens(129), prefill_lens(5)
    ((8, 32), (8, 32, 128), (5,))

Private helpers of :mod:`mobilize.backends.litert.decoder`.
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from pathlib import Path
from typing import Any, Iterator

from mobilize.core.errors import UnsupportedByEngineError, UnsupportedModelError, headline, translate_errors

CACHE_LEN_CAP = 1024
"""The KV cache holds the model's ``max_position_embeddings`` tokens, at most this many (a fixed-size input and output
of every signature, which the session binds in place; attention reads all of it at every token, masked)."""
PREFILL_LENS = (8, 32, 128, 512)
"""Prefill signature lengths exported (those that fit the cache); a prompt runs through the smallest that holds it
(padded), or in windows of the largest."""
INT4_RECIPES = {32: "dynamic_int4_block32", 128: "dynamic_int4_block128"}
"""litert-torch's int4 recipes by block size (the two it offers)."""


def prefill_lens(cache_len: int) -> tuple[int, ...]:
    """The prefill lengths exported for a cache of ``cache_len`` tokens (the cache itself when none fits)."""
    return tuple(n for n in PREFILL_LENS if n <= cache_len) or (cache_len,)


@contextlib.contextmanager
def _tensorflow_schema_alias() -> Iterator[None]:
    """litert-torch 0.10's ``generative/layers/lora.py`` imports ``tensorflow.lite.python.schema_py_generated`` at
    import time, but tensorflow is not one of its dependencies (and is not installed here): while the generative
    modules import, that name is ai-edge-litert's copy of the same flatbuffer schema module.  The aliases are
    removed afterwards, so nothing else sees a fake ``tensorflow`` package."""
    from mobilize.core.packages import installed

    if "litert_torch.generative.layers.lora" in sys.modules or installed("tensorflow"):
        yield
        return
    import ai_edge_litert.schema_py_generated as schema

    added = [n for n in ("tensorflow", "tensorflow.lite", "tensorflow.lite.python") if n not in sys.modules]
    for name in added:
        sys.modules[name] = types.ModuleType(name)
    sys.modules["tensorflow.lite.python"].schema_py_generated = schema  # type: ignore[attr-defined]
    sys.modules["tensorflow.lite.python.schema_py_generated"] = schema
    added.append("tensorflow.lite.python.schema_py_generated")
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


def generative() -> tuple[Any, Any, Any, Any]:
    """litert-torch's (model_config, model_builder, converter, ExportConfig)."""
    from mobilize.backends.litert.convert import _import_litert_torch

    _import_litert_torch()
    with _tensorflow_schema_alias(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import litert_torch.generative.layers.model_config as model_config
        from litert_torch.generative.utilities import converter, model_builder
        from litert_torch.generative.utilities.export_config import ExportConfig
    return model_config, model_builder, converter, ExportConfig


QKV_BIAS = {"llama": False, "mistral": False, "qwen2": True}
"""The transformers architectures litert-torch's decoder-only recipe describes (``model_type`` -> q/k/v projections
with biases): RMSNorm, gated SiLU MLP, rotary positions, the Llama tensor names (Qwen 2.5's own litert-torch
example is this recipe with q/k/v biases)."""
TAKES = "Llama, Mistral and Qwen2 (RMSNorm, gated SiLU MLP, default rotary positions, full attention)"


def refusal(config: Any, cache_len: int = CACHE_LEN_CAP) -> str | None:
    """Why litert-torch's decoder-only recipe does not describe this transformers config, or None."""
    arch = ", ".join(getattr(config, "architectures", None) or []) or type(config).__name__
    model_type = getattr(config, "model_type", None)
    if model_type not in QKV_BIAS:
        return f"the LiteRT decoder converts {TAKES} only; this model is {arch} (model_type {model_type})"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    found = [f"{k}={getattr(config, k)}" for k in ("attention_bias", "mlp_bias") if getattr(config, k, False)]
    if getattr(config, "hidden_act", "silu") != "silu":
        found.append(f"hidden_act={config.hidden_act}")
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        found.append(f"rope_type={rope.get('rope_type', rope.get('type'))}")
    window = getattr(config, "sliding_window", None)
    if window and getattr(config, "use_sliding_window", True) and window < min(cache_len, CACHE_LEN_CAP):
        found.append(f"sliding_window={window}")
    return f"the LiteRT decoder converts {TAKES}; this {arch} has {', '.join(found)}" if found else None


def model_config(config: Any, cache_len: int) -> Any:
    """litert-torch's ``ModelConfig`` for a transformers Llama, Mistral or Qwen2 config (its RMSNorm epsilon, not
    litert's 1e-5)."""
    from mobilize.lowering.decoder import kv_shape

    cfg = generative()[0]
    layers, kv_heads, head_dim = kv_shape(config)
    rope = getattr(config, "rope_parameters", None) or {}
    norm = cfg.NormalizationConfig(type=cfg.NormalizationType.RMS_NORM, epsilon=config.rms_norm_eps)
    block = cfg.TransformerBlockConfig(
        attn_config=cfg.AttentionConfig(
            num_heads=config.num_attention_heads, head_dim=head_dim, num_query_groups=kv_heads,
            rotary_base=rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)), rotary_percentage=1.0,
            qkv_use_bias=QKV_BIAS[config.model_type]),
        ff_config=cfg.FeedForwardConfig(type=cfg.FeedForwardType.GATED,
                                        activation=cfg.ActivationConfig(cfg.ActivationType.SILU),
                                        intermediate_size=config.intermediate_size),
        pre_attention_norm_config=norm, post_attention_norm_config=norm)
    return cfg.ModelConfig(vocab_size=config.vocab_size, num_layers=layers, max_seq_len=cache_len,
                           embedding_dim=config.hidden_size, block_configs=block, final_norm_config=norm,
                           lm_head_share_weight_with_embedding=bool(getattr(config, "tie_word_embeddings", False)))


def convert(folder: Path, out_dir: Path, quantize: str) -> Path:
    """The folder's decoder (one of :data:`QKV_BIAS`'s architectures, else refused) as a ``.tflite``
    (``quantize``: litert-torch's recipe name, ``none`` or ``dynamic_int4_block32``)."""
    from transformers import AutoConfig

    from mobilize.lowering.causal_lm import quiet_transformers
    from mobilize.lowering.onnx_export import native_output

    folder, out_dir = Path(folder), Path(out_dir)
    with quiet_transformers():
        config = AutoConfig.from_pretrained(str(folder))
    cache_len = min(int(getattr(config, "max_position_embeddings", None) or CACHE_LEN_CAP), CACHE_LEN_CAP)
    why = refusal(config, cache_len)
    if why:
        raise UnsupportedByEngineError(why)
    block = next((b for b, name in INT4_RECIPES.items() if name == quantize), None)
    if block and (config.hidden_size % block or config.intermediate_size % block):
        raise UnsupportedByEngineError(f"litert-torch's {quantize} needs every linear's input features to be a "
                                       f"multiple of {block} (hidden {config.hidden_size}, intermediate "
                                       f"{config.intermediate_size})")
    _, builder, converter, export_config = generative()
    names = builder.TENSOR_NAMES if config.tie_word_embeddings else builder.TENSOR_NAMES_WITH_SEPARATE_LM_HEAD
    out_dir.mkdir(parents=True, exist_ok=True)
    what = f"litert-torch conversion of the decoder in {folder}"
    lines: list[str] = []  # the converter's progress lines and MLIR logs stay out of the terminal
    with translate_errors(UnsupportedModelError, what, message=lambda exc: f"{what} failed: {headline(exc)[:300]}"), \
            native_output(lines), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = builder.build_decoder_only_model(str(folder), model_config(config, cache_len), names,
                                                 mask_cache_size=cache_len)
        path = converter.convert_to_tflite(model, output_path=str(out_dir), output_name_prefix="model",
                                           prefill_seq_len=list(prefill_lens(cache_len)), kv_cache_max_len=cache_len,
                                           quantize=quantize,
                                           export_config=export_config(output_logits_on_prefill=True))
    return Path(path)
