"""What several engines share to export a causal decoder: the model loaded from a saved transformers folder, and
the KV cache as explicit inputs and outputs (``past_key_i``/``past_value_i`` in, ``present_*`` out), the interface
ONNX Runtime and OpenVINO run a decoder with.

    >>> names = past_kv_names(2)
    >>> names[0][:3], names[1][:2]
    (['input_ids', 'past_key_0', 'past_value_0'], ['logits', 'present_key_0'])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_hf_decoder(folder: str | Path) -> Any:
    """A transformers causal LM from a folder ``save_pretrained`` wrote (config.json + weights), float32, eval; a
    folder that is not one, or whose weights are not this model's, refused in one line
    (:func:`mobilize.lowering.causal_lm.load_causal_lm`)."""
    from mobilize.lowering.causal_lm import load_causal_lm

    return load_causal_lm(folder)


def conv1d_as_linear(model: Any) -> int:
    """transformers' ``Conv1D`` (GPT-2's attention and MLP projections: ``x @ W + b`` with ``W`` [in, out]) swapped in
    place for the ``nn.Linear`` it computes (``W`` transposed), so a quantizer that takes linears (torchao) quantizes
    those projections too, not only ``lm_head``; returns how many were swapped (a state dict keeps its keys)."""
    import torch
    from transformers.pytorch_utils import Conv1D

    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Conv1D):
                linear = torch.nn.Linear(child.weight.shape[0], child.nf, bias=child.bias is not None)
                linear.weight = torch.nn.Parameter(child.weight.detach().t().contiguous())
                if child.bias is not None:
                    linear.bias = child.bias
                setattr(parent, name, linear)
                swapped += 1
    return swapped


def kv_shape(config: Any) -> tuple[int, int, int]:
    """(layers, KV heads, head dim) of a transformers decoder config."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers, getattr(config, "num_key_value_heads", None) or heads, head_dim


def past_kv_names(layers: int) -> tuple[list[str], list[str]]:
    """(input names, output names) of the past/present interface."""
    pairs = [f"{kv}_{i}" for i in range(layers) for kv in ("key", "value")]
    return ["input_ids"] + [f"past_{p}" for p in pairs], ["logits"] + [f"present_{p}" for p in pairs]


def past_kv_module(model: Any) -> Any:
    """``forward(input_ids, *past) -> (logits, *present)``: the cache as tensors in and out (a DynamicCache filled
    from them inside, so the traced graph holds no Python cache object)."""
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    layers, _, _ = kv_shape(model.config)

    class PastKV(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, *past):
            # full layers, never a sliding window's: the past/present tensors keep every position, and the model's
            # own mask (sliding or not) picks what each layer sees - a sliding layer's cache would drop positions
            # by their count, which tracing bakes in for the example's lengths
            cache = DynamicCache()
            cache.layers = [DynamicLayer() for _ in range(layers)]
            for i in range(layers):
                layer = cache.layers[i]
                if hasattr(layer, "lazy_initialization"):  # seeded directly: a fresh layer's cat onto an empty
                    layer.lazy_initialization(past[2 * i], past[2 * i + 1])  # rank-1 tensor fails in converters
                layer.keys, layer.values = past[2 * i], past[2 * i + 1]
            out = self.m(input_ids=input_ids, cache=cache, use_cache=True)
            present = []
            for layer in out.cache.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    return PastKV().eval()


def past_kv_example(model: Any, seq: int = 2, past: int = 3) -> tuple:
    """Example inputs for tracing the past/present interface."""
    import torch

    layers, kv_heads, head_dim = kv_shape(model.config)
    return (torch.zeros((1, seq), dtype=torch.long),) + tuple(torch.zeros(1, kv_heads, past, head_dim)
                                                              for _ in range(2 * layers))
