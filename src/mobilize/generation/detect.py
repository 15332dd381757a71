"""Is a model reference a causal LM (the ``generation`` task) without building it?  ``--task generation`` says
so; else a zoo entry's declared task, or a saved transformers folder: a causal LM is what transformers' own
``AutoModelForCausalLM`` mapping takes (:mod:`mobilize.lowering.causal_lm`: GPT-2's ``GPT2LMHeadModel`` as well as
every ``*ForCausalLM``).  A transformers folder is read as a causal LM only, so one that is not (an encoder such as
``BertModel``, an encoder-decoder, a config transformers does not know) is refused here, in one line with the
reason, before anything loads.  A ``file.py:Class`` decoder needs ``--task generation``
(its class is known only once it is built).

    >>> from mobilize.sources.reference import ModelRef
    >>> wants_generation(None, ModelRef.parse("zoo:tiny_lm")), wants_generation(None, ModelRef.parse("zoo:conv_bn_relu"))
    (True, False)
"""

from __future__ import annotations

from pathlib import Path

from mobilize.lowering.causal_lm import check_folder
from mobilize.sources.reference import ModelRef, RefKind


def wants_generation(task: str | None, ref: ModelRef) -> bool:
    """True for a causal LM; a transformers folder that is not one raises
    :class:`~mobilize.core.errors.UnsupportedModelError`."""
    if task is not None:
        return task == "generation"
    if ref.kind == RefKind.ZOO:
        from mobilize.zoo import DECODERS, ZOO

        if ref.attribute in ZOO.names():  # a built-in entry: known without importing it (and torch)
            return ref.attribute in DECODERS
        return getattr(ZOO.get(ref.attribute), "task", None) == "generation"
    if ref.kind == RefKind.MODEL_FOLDER:
        check_folder(Path(ref.path))
        return True
    return False
