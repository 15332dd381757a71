"""Eager PyTorch decoders: the transformers model itself, run with its own ``DynamicCache`` under ``torch.no_grad``
(``eager-fp32``), or with every linear (``lm_head`` included) quantized by torchao's ``Int8WeightOnlyConfig``:
int8 weights with one scale per output channel, float32 activations (``eager-int8wo``).

    >>> FP32.name, INT8_WEIGHT_ONLY.weights, INT8_WEIGHT_ONLY.promise
    ('eager-fp32', 'int8', <Promise.QUANTIZED: 'quantized'>)

The fp32 "file" is the saved folder copied into the output folder.  The int8 file is the quantized state dict
(``torch.save``; torchao's tensor subclasses load back with ``weights_only=True``) beside the model's
``config.json``; loading builds the model from the config and assigns the quantized weights.  The session holds
the ``DynamicCache`` the last call returned; a prefill starts a new one.  Threads: ``torch.set_num_threads``,
which is process-wide, so each call sets it again.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mobilize.core.decoder import CachedDecoderSession, DecoderVariant, Promise
from mobilize.core.packages import require
from mobilize.core.errors import UnsupportedModelError, translate_errors

FLOAT_PACKAGES = ("torch", "transformers")
INT8_PACKAGES = FLOAT_PACKAGES + ("torchao",)
INT8_WEIGHTS = "int8wo.pt"
"""The quantized state dict's file name inside the int8 folder."""
_CONFIG_FILES = ("config.json", "generation_config.json")


def build_fp32(folder: Path, out_dir: Path) -> Path:
    """The saved folder itself, copied into ``out_dir`` (what eager runs is the transformers model)."""
    out = Path(out_dir) / "model-fp32"
    shutil.copytree(Path(folder), out, dirs_exist_ok=True)
    return out


def build_int8wo(folder: Path, out_dir: Path) -> Path:
    """torchao ``quantize_(model, Int8WeightOnlyConfig())``; the quantized state dict beside the model's config."""
    import torch

    from mobilize.lowering.decoder import conv1d_as_linear, load_hf_decoder

    require(INT8_PACKAGES, "the eager decoder")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    folder, out = Path(folder), Path(out_dir) / "model-int8wo"
    out.mkdir(parents=True, exist_ok=True)
    with translate_errors(UnsupportedModelError, f"torchao int8 weight-only quantization of {folder}"):
        model = load_hf_decoder(folder)
        conv1d_as_linear(model)  # GPT-2's projections are Conv1D: as linears, torchao quantizes them
        quantize_(model, Int8WeightOnlyConfig())
        torch.save(model.state_dict(), out / INT8_WEIGHTS)
    for name in _CONFIG_FILES:
        if (folder / name).is_file():
            shutil.copy2(folder / name, out / name)
    return out


def _load_model(path: Path) -> Any:
    """The transformers model a build wrote: the saved folder, or the config with the int8 state dict assigned."""
    import torch

    from mobilize.lowering.causal_lm import quiet_transformers
    from mobilize.lowering.decoder import conv1d_as_linear, load_hf_decoder

    if not (path / INT8_WEIGHTS).is_file():
        return load_hf_decoder(path)
    require(INT8_PACKAGES, "the eager decoder")
    import torchao  # noqa: F401  (registers the tensor subclasses the state dict holds as safe globals)
    from transformers import AutoConfig, AutoModelForCausalLM

    # built on CPU, not "meta": the rotary embedding's buffers are not in the state dict
    with quiet_transformers():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path)), dtype=torch.float32)
    conv1d_as_linear(model)  # as the build quantized it
    model.load_state_dict(torch.load(path / INT8_WEIGHTS, weights_only=True), assign=True)
    return model.eval()


class EagerDecoderSession(CachedDecoderSession):
    """A transformers causal LM run eagerly, its KV cache a ``DynamicCache``."""

    def __init__(self, path: Path, threads: int, max_len: int):
        import torch

        require(FLOAT_PACKAGES, "the eager decoder")
        torch.set_num_threads(threads)
        self.path = Path(path)
        with translate_errors(UnsupportedModelError, f"eager PyTorch could not load the decoder in {self.path}"):
            self.model = _load_model(self.path)
        self.threads = threads
        self.max_len = max_len
        self._cache: Any = None
        import inspect

        self._keeps = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        if not self._keeps:
            self.last_position = ""

    def _start(self) -> None:
        from transformers import DynamicCache

        self._cache = DynamicCache(config=self.model.config)

    last_position = "transformers computes the output head at the last prompt position only (logits_to_keep=1)"

    def _forward(self, ids: list[int], start: int, keep: int = 0) -> Any:
        """Every position's logits; ``keep=1``: the last one's only (transformers' ``logits_to_keep``, as its
        ``generate`` prefills)."""
        import numpy as np
        import torch

        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([list(ids)], dtype=torch.long), cache=self._cache,
                             use_cache=True, **({"logits_to_keep": keep} if keep and self._keeps else {}))
        self._cache = out.cache
        return np.asarray(out.logits[0].float().numpy(), dtype=np.float32)

    def _forward_last(self, ids: list[int], start: int) -> Any:
        return self._forward(ids, start, keep=1)[-1]

    def close(self) -> None:
        self.model = self._cache = None


_RUN = "transformers DynamicCache, eager PyTorch on CPU"

FP32 = DecoderVariant(
    runtime=("torch", "transformers"),
    name="eager-fp32", engine="eager", weights="fp32", promise=Promise.FLOAT,
    build=build_fp32, load=EagerDecoderSession, packages=FLOAT_PACKAGES, session_loads_transformers=True,
    how=f"float32, {_RUN}",
)
INT8_WEIGHT_ONLY = DecoderVariant(
    runtime=("torch", "transformers"),
    name="eager-int8wo", engine="eager", weights="int8", promise=Promise.QUANTIZED,
    float_sibling="eager-fp32",
    build=build_int8wo, load=EagerDecoderSession, packages=INT8_PACKAGES, session_loads_transformers=True,
    how=f"torchao Int8WeightOnlyConfig (int8 weights per output channel, every linear and lm_head; embeddings "
        f"float32; float32 activations), {_RUN}",
)
