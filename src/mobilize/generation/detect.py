"""Is a model reference a causal LM (the ``generation`` task) without building it?  ``--task generation`` says
so; else a zoo entry's declared task, or a saved transformers folder: a causal LM is what transformers' own
``AutoModelForCausalLM`` mapping takes (its config's ``model_type``, the classes its ``architectures`` name: GPT-2's
``GPT2LMHeadModel`` as well as every ``*ForCausalLM``).  A transformers folder is read as a causal LM only, so one
that is not (an encoder such as ``BertModel``, an encoder-decoder, a config transformers does not know) is refused
here, in one line with the reason, before anything loads.  A ``file.py:Class`` decoder needs ``--task generation``
(its class is known only once it is built).

    >>> from mobilize.sources.reference import ModelRef
    >>> wants_generation(None, ModelRef.parse("zoo:tiny_lm")), wants_generation(None, ModelRef.parse("zoo:conv_bn_relu"))
    (True, False)
    >>> not_a_causal_lm({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}) is None
    True
    >>> print(not_a_causal_lm({"model_type": "bert", "architectures": ["BertModel"]}))
    its config.json names BertModel, which is not a causal LM (transformers would add an untrained BertLMHeadModel ...
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mobilize.core.errors import UnsupportedModelError
from mobilize.sources.reference import ModelRef, RefKind

CAUSAL_LM_HINT = ("--task generation takes a decoder-only model that transformers' AutoModelForCausalLM loads (GPT-2, "
                  "OPT, GPT-NeoX, Llama, Qwen2, Phi3, Mistral, Gemma...), saved with save_pretrained")


def wants_generation(task: str | None, ref: ModelRef) -> bool:
    """True for a causal LM; a transformers folder that is not one raises :class:`UnsupportedModelError`."""
    if task is not None:
        return task == "generation"
    if ref.kind == RefKind.ZOO:
        from mobilize.zoo import ZOO

        return getattr(ZOO.get(ref.attribute), "task", None) == "generation"
    if ref.kind == RefKind.MODEL_FOLDER:
        check_causal_lm_folder(Path(ref.path))
        return True
    return False


def check_causal_lm_folder(folder: Path) -> dict[str, Any]:
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
    None: transformers' own mappings decide, never a class-name suffix."""
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
    causal = causal_lm_class_names()
    if named and not any(a in causal for a in named):
        return (f"its config.json names {', '.join(named)}, which is not a causal LM (transformers would add an "
                f"untrained {_first(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])} head to it)")
    return None


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


def _first(value: Any) -> str:
    return value if isinstance(value, str) else value[0]
