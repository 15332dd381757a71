"""Is a model reference a causal LM (the ``generation`` task) without building it?  ``--task generation`` says
so; else a zoo entry's declared task, or a saved transformers folder whose config names a ``*ForCausalLM``.
A ``file.py:Class`` decoder needs ``--task generation`` (its class is known only once it is built).

    >>> from mobilize.sources.reference import ModelRef
    >>> wants_generation(None, ModelRef.parse("zoo:tiny_lm")), wants_generation(None, ModelRef.parse("zoo:conv_bn_relu"))
    (True, False)
"""

from __future__ import annotations

import json
from pathlib import Path

from mobilize.sources.reference import ModelRef, RefKind


def wants_generation(task: str | None, ref: ModelRef) -> bool:
    if task is not None:
        return task == "generation"
    if ref.kind == RefKind.ZOO:
        from mobilize.zoo import ZOO

        return getattr(ZOO.get(ref.attribute), "task", None) == "generation"
    if ref.kind == RefKind.MODEL_FOLDER:
        try:
            config = json.loads((Path(ref.path) / "config.json").read_text())
        except (OSError, ValueError):
            return False
        return any(str(a).endswith("ForCausalLM") for a in config.get("architectures") or [])
    return False
