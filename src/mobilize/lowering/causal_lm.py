"""A saved transformers causal LM, checked and loaded: a causal LM is what transformers' own ``AutoModelForCausalLM``
mapping takes (config.json's ``model_type``, the classes its ``architectures`` name: GPT-2's ``GPT2LMHeadModel`` as
well as every ``*ForCausalLM``), never a class-name suffix.  A folder that is not one (an encoder such as
``BertModel``, which ``AutoModelForCausalLM`` would load as ``BertLMHeadModel`` with an untrained head; an
encoder-decoder; a ``model_type`` transformers does not know), or whose weights are missing, unreadable or not this
model's, is refused in one line with the reason; transformers' own load report stays off the terminal.

    >>> not_a_causal_lm({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}) is None
    True
    >>> print(not_a_causal_lm({"model_type": "bert", "architectures": ["BertModel"]}))
    its config.json names BertModel, which is not a causal LM (transformers would add an untrained BertLMHeadModel ...
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator

from mobilize.core.errors import UnsupportedModelError

CAUSAL_LM_HINT = ("--task generation takes a decoder-only model that transformers' AutoModelForCausalLM loads (GPT-2, "
                  "OPT, GPT-NeoX, Llama, Qwen2, Phi3, Mistral, Gemma...), saved with save_pretrained")
WEIGHT_FILES = ("*.safetensors", "*.bin")
"""The weight files ``save_pretrained`` writes (one, or shards with an index)."""


def load_causal_lm(folder: str | Path) -> Any:
    """The causal LM saved in ``folder``, float32, eval: its config checked first (:func:`check_folder`), then
    loaded with transformers quiet; weights missing from the files (a head left untrained), weights the model has no
    place for, or files that cannot be read are refused in one line."""
    import torch
    from transformers import AutoModelForCausalLM

    from mobilize.core.errors import headline, translate_errors

    folder = Path(folder)
    check_folder(folder)
    if not any(next(folder.glob(pattern), None) for pattern in WEIGHT_FILES):
        raise UnsupportedModelError(f"{folder} holds no weights (no {', '.join(WEIGHT_FILES)})",
                                    hint="save the model with model.save_pretrained(folder)")
    with translate_errors(UnsupportedModelError, f"{folder}'s weights",
                          message=lambda exc: f"{folder}: its weights cannot be loaded: {headline(exc)[:300]}"), \
            quiet_transformers():
        lm, info = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, output_loading_info=True)
    found = [f"{len(keys)} weight(s) {what} ({_some(keys)})" for what, keys in (
        ("missing from its files", info.get("missing_keys")), ("in its files the model has no place for",
         info.get("unexpected_keys")), ("of another shape", info.get("mismatched_keys"))) if keys]
    if found:
        raise UnsupportedModelError(f"{folder} does not hold this {type(lm).__name__}'s weights: {'; '.join(found)}",
                                    hint="give the folder save_pretrained wrote for the whole causal LM, head included")
    return lm.eval()


def check_folder(folder: Path) -> dict[str, Any]:
    """The folder's config.json if it describes a causal LM; else one line saying why not
    (:class:`UnsupportedModelError`)."""
    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text())
    except OSError as exc:
        raise UnsupportedModelError(f"{folder} is not a transformers model: {path.name} cannot be read "
                                    f"({exc.strerror})", hint=CAUSAL_LM_HINT) from None
    except ValueError as exc:
        raise UnsupportedModelError(f"{folder} is not a transformers model: {path.name} is not JSON ({exc})",
                                    hint=CAUSAL_LM_HINT) from None
    why = not_a_causal_lm(config) if isinstance(config, dict) else "its config.json is not a JSON object"
    if why:
        raise UnsupportedModelError(f"{folder}: {why}", hint=CAUSAL_LM_HINT)
    return config


def not_a_causal_lm(config: dict[str, Any]) -> str | None:
    """Why a transformers config (config.json's contents) is not a causal LM that ``AutoModelForCausalLM`` loads, or
    None: transformers' own mappings decide."""
    from transformers import __version__
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)

    model_type = config.get("model_type")
    named = [str(a) for a in config.get("architectures") or []]
    if not model_type:
        return "its config.json names no model_type (not a config save_pretrained writes)"
    if model_type not in CONFIG_MAPPING_NAMES:
        own_code = " and needs its own modelling code (auto_map), which mobilize does not run" \
            if config.get("auto_map") else ""
        return f"transformers {__version__} does not know model_type '{model_type}'{own_code}"
    if model_type in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES or config.get("is_encoder_decoder"):
        arch = ", ".join(named) or MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.get(model_type, model_type)
        return f"{arch} is an encoder-decoder; only a decoder-only model generates with one KV cache here"
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return f"transformers has no causal-LM head for model_type '{model_type}'" + \
            (f" ({', '.join(named)})" if named else "")
    if named and not any(a in causal_lm_class_names() for a in named):
        return (f"its config.json names {', '.join(named)}, which is not a causal LM (transformers would add an "
                f"untrained {_first(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])} head to it)")
    return None


def saved_parameters(folder: Path) -> int | None:
    """Parameters of a saved transformers folder, from its safetensors files' headers alone (each tensor's shape; no
    weight is read, nothing unpickled); None where it has no safetensors file or a header cannot be read."""
    import math

    files = sorted(Path(folder).glob("*.safetensors"))
    total = 0
    for f in files:
        try:
            with open(f, "rb") as fh:
                size = int.from_bytes(fh.read(8), "little")
                if not 0 < size < 1 << 28:
                    return None
                header = json.loads(fh.read(size))
            total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return total if files else None


def short_sliding_window(config: dict[str, Any]) -> int | None:
    """The sliding attention window of a saved config (``config.json``'s dict) where it bites: set, switched on
    (Qwen2's ``use_sliding_window``) and shorter than the model's context; else None.

        >>> short_sliding_window({"sliding_window": 8, "max_position_embeddings": 128})
        8
        >>> short_sliding_window({"sliding_window": 4096, "use_sliding_window": False, "max_position_embeddings": 32768})
    """
    window = config.get("sliding_window")
    context = config.get("max_position_embeddings") or config.get("n_positions")
    if isinstance(window, int) and window > 0 and config.get("use_sliding_window", True) and \
            (not isinstance(context, int) or window < context):
        return window
    return None


WINDOW_AWARE = frozenset({"gemma2", "gemma3", "gemma3_text"})
"""Model types whose sliding windows onnxruntime-genai's builder and llama.cpp's converter build as local attention
(a Gemma 2 with a window of 8: the builder's fp32 file 127.7 dB from the model); every other one's window they drop
silently (a Mistral with a window of 8: 14.5 dB at 12 tokens, then GroupQueryAttention refused 40), so those engines
refuse it before building."""


def window_refusal(config: dict[str, Any], engine: str) -> str | None:
    """Why ``engine`` (the builder or llama.cpp) cannot take a model with a sliding window, or None."""
    window = short_sliding_window(config)
    if window is None or config.get("model_type") in WINDOW_AWARE:
        return None
    return (f"{engine} builds full causal attention for model_type {config.get('model_type')}: this model's "
            f"sliding_window={window} (shorter than its context) would be dropped, giving other answers past "
            f"{window} tokens (it builds sliding windows of Gemma 2 and 3 only)")


def causal_lm_class_names() -> frozenset[str]:
    """Every class transformers' ``AutoModelForCausalLM`` builds (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ...)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names: set[str] = set()
    for value in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        names.update([value] if isinstance(value, str) else value)
    return frozenset(names)


def is_causal_lm(module: Any) -> bool:
    """A transformers model whose class (or a class it derives from) ``AutoModelForCausalLM`` builds."""
    names = causal_lm_class_names()
    return hasattr(module, "save_pretrained") and any(c.__name__ in names for c in type(module).__mro__)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' logging (its load report with ANSI colours, config warnings) below ERROR and its progress bars
    off while the block runs, as they were afterwards: what it would say, the caller turns into its own message."""
    import warnings

    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _first(value: Any) -> str:
    return value if isinstance(value, str) else value[0]


def _some(keys: Any, shown: int = 3) -> str:
    names = sorted(str(k if isinstance(k, str) else k[0]) for k in keys)
    return ", ".join(names[:shown]) + (f", ... {len(names) - shown} more" if len(names) > shown else "")
