"""A transformers causal LM as one ExecuTorch program with ExecuTorch's LLM custom ops: ``llama::update_cache``
writes each step's keys/values into a static cache held in the program as mutable buffers, ``llama::custom_sdpa``
attends over the cache up to the current position (the optimum-executorch approach, plugged in through
transformers' ``AttentionInterface``), XNNPACK runs the linears (float32, or torchao 8da4w).

The one method, ``forward(input_ids [1, T], cache_position [T]) -> logits [1, T, V]``, serves the prefill (any T up to
the cache length - 1) and each decode step (T = 1); ``get_max_seq_len`` and ``get_vocab_size`` are constant methods,
as ExecuTorch's llama export writes them.

    >>> group_size([64, 96, 128])
    32
    >>> group_size([48, 64]) is None
    True
"""

from __future__ import annotations

import math
from typing import Any

from mobilize.core.errors import UnsupportedByEngineError
from mobilize.lowering.decoder import kv_shape

CACHE_LEN_CAP = 1024
"""The static cache holds the model's ``max_position_embeddings`` tokens, at most this many (the cache is a fixed
buffer in the program, allocated whole when it loads)."""
GROUP = 32
"""torchao 8da4w weight group size (XNNPACK's blockwise int4 kernels take multiples of 32)."""
ATTENTION = "mobilize_executorch_custom_sdpa"
"""The name the custom-op attention is registered under in transformers' ``AttentionInterface``."""
SDPA_TOLERANCE = 1e-3
"""Largest logit difference, relative to the largest logit, between the model with its own attention and with the
custom ops, both eager, before export: more means the custom ops do not reproduce this model's attention."""


def cache_len(config: Any) -> int:
    """Tokens the static cache holds for this model."""
    return min(int(getattr(config, "max_position_embeddings", None) or CACHE_LEN_CAP), CACHE_LEN_CAP)


def group_size(in_features: list[int], group: int = GROUP) -> int | None:
    """The 8da4w group size: ``group`` where it divides every linear's in-features, else None (per channel)."""
    return group if all(n % group == 0 for n in in_features) else None


def check_supported(config: Any) -> None:
    """Refuse what ``custom_sdpa`` (plain causal attention over the whole cache) does not compute."""
    found = []
    window = getattr(config, "sliding_window", None)
    if window and getattr(config, "use_sliding_window", True) and window < cache_len(config):
        found.append(f"sliding_window={window}")
    if getattr(config, "attn_logit_softcapping", None):
        found.append(f"attn_logit_softcapping={config.attn_logit_softcapping}")
    if found:
        raise UnsupportedByEngineError(f"the ExecuTorch decoder's custom SDPA computes full causal attention only "
                                       f"(no sliding window shorter than its cache, no attention soft-capping); "
                                       f"this model has {', '.join(found)}")


def quantize_8da4w(model: Any, group: int = GROUP) -> int | None:
    """torchao 8da4w in place: int8 dynamic per-token activations, int4 symmetric weights per group of
    :func:`group_size` (per output channel where no group fits); the embedding table int8 per row first, as
    optimum-executorch's ``--qembedding 8w`` stores it (a float32 table was 1.05 GB of the 1.75 GB file at
    Llama-3.2-1B's shape, gathered one row a token; a table tied to the output head stays tied to nothing: the head
    is a linear, int4).  Returns the group size (None: per channel)."""
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    for module in model.modules():
        if isinstance(module, torch.nn.Embedding):  # padding_idx only shapes the gradient, and an embedding with it
            module.padding_idx = None  # matches no pattern of ExecuTorch's fusion into embedding_byte
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),
              lambda module, fqn: isinstance(module, torch.nn.Embedding))
    group = group_size([m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear)], group)
    quantize_(model, Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(group) if group else PerAxis(0)))
    return group


def _custom_sdpa(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention: query [B, H, S, D]; key/value are the whole caches [B, S_max, KVH, D] (the cache
    layer returns them so); the mask is ignored: custom_sdpa is causal from ``start_pos``."""
    import torch

    out = torch.ops.llama.custom_sdpa(query.transpose(1, 2), key, value, module._mobilize_start_pos, None, 0.0, True,
                                      scaling)
    return out, None  # [B, S, H, D], as transformers expects


def custom_ops_module(model: Any) -> Any:
    """``forward(input_ids, cache_position) -> logits`` over ``model`` with its attention switched to the custom
    ops and a static cache of :func:`cache_len` tokens as buffers (``k_cache_i``/``v_cache_i``)."""
    import torch
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers torch.ops.llama.*)
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.cache_utils import StaticCache, StaticLayer
    from transformers.masking_utils import sdpa_mask

    config, length = model.config, cache_len(model.config)
    layers, kv_heads, head_dim = kv_shape(config)
    AttentionInterface.register(ATTENTION, _custom_sdpa)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # a mask is still built; custom_sdpa ignores it
    model.set_attn_implementation(ATTENTION)

    class Layer(StaticLayer):
        """Keys/values [B, S_max, KVH, D] updated in place at the owner's start position."""

        def __init__(self, keys, values, owner):
            super().__init__(length)
            self.keys, self.values, self.owner, self.is_initialized, self.device = keys, values, owner, True, keys.device

        def update(self, key_states, value_states, *args, **kwargs):
            torch.ops.llama.update_cache(key_states.transpose(1, 2), self.keys, self.owner.start_pos)
            torch.ops.llama.update_cache(value_states.transpose(1, 2), self.values, self.owner.start_pos)
            return self.keys, self.values

        def get_seq_length(self):
            return self.owner.start_pos

        def get_mask_sizes(self, *args, **kwargs):
            return length, 0

        def get_max_cache_shape(self):
            return length

    class CustomOpsLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model
            for i in range(layers):
                self.register_buffer(f"k_cache_{i}", torch.zeros(1, length, kv_heads, head_dim), persistent=False)
                self.register_buffer(f"v_cache_{i}", torch.zeros(1, length, kv_heads, head_dim), persistent=False)

        def forward(self, input_ids, cache_position):
            cache = StaticCache(max_cache_len=length, config=config)
            cache.layers = [Layer(getattr(self, f"k_cache_{i}"), getattr(self, f"v_cache_{i}"), self)
                            for i in range(layers)]
            start = cache_position[0].item()
            torch._check(start >= 0)
            torch._check(start < length)
            self.start_pos = start
            for sub in self.m.modules():  # the attention modules among them read it (_custom_sdpa)
                sub._mobilize_start_pos = start
            return self.m(input_ids=input_ids, position_ids=cache_position.unsqueeze(0), cache=cache,
                          use_cache=True).logits

    return CustomOpsLM().eval()


def program_bytes(model: Any, checked: bool = False) -> bytes:
    """The .pte of ``model`` (float or already quantized): custom ops, exported and lowered; their attention is
    first checked against the model's own (:func:`check_custom_attention`) unless ``checked`` (done on the float model
    before quantizing it)."""
    check_supported(model.config)
    if not checked:
        check_custom_attention(model)
    return export_program(custom_ops_module(model), model.config.vocab_size)


def check_custom_attention(model: Any) -> None:
    """Raise UnsupportedByEngineError unless the model with the custom ops (eager) gives the logits of the model with
    its own attention on 8 tokens.  Done on the float model: with 8da4w's int8 activations quantized per token on the
    fly, float rounding (3e-6 here) flips activation codes, so the logits of a 24-layer 0.5B model move by 0.09 (of a
    range of 3) when its input is scaled by 1 + 1e-6 - a check there would refuse a correct attention (it did: 0.076
    on Qwen2.5-0.5B's shape, where the float check matches to 3e-6)."""
    import torch

    ids = torch.arange(min(8, cache_len(model.config) - 1)).remainder(model.config.vocab_size).unsqueeze(0)
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    _check_custom_ops(custom_ops_module(model), ids, reference)


def _check_custom_ops(module: Any, ids: Any, reference: Any) -> None:
    """Raise UnsupportedByEngineError unless the custom-op module, eager, gives ``reference`` (the model's logits with
    its own attention); then empty the cache again."""
    import torch

    with torch.no_grad():
        got = module(ids, torch.arange(ids.shape[1]))
    diff = (got - reference).abs().max().item()
    scale = reference.abs().max().item()
    for name, buf in module.named_buffers():
        if name.startswith(("k_cache_", "v_cache_")):
            buf.zero_()
    if not math.isfinite(diff) or diff > SDPA_TOLERANCE * scale + 1e-6:
        raise UnsupportedByEngineError(f"ExecuTorch custom SDPA does not reproduce this model's attention "
                                    f"(max logit difference {diff:.3g} against {scale:.3g})")


def export_program(module: Any, vocab_size: int) -> bytes:
    """The .pte bytes: torch.export with a dynamic sequence length, XNNPACK partitioner, constant methods."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower

    length = cache_len(module.m.config)
    seq = torch.export.Dim("seq_len", min=1, max=length - 1)
    with torch.no_grad():
        program = torch.export.export(module, (torch.zeros((1, 2), dtype=torch.long), torch.arange(2)),
                                      dynamic_shapes=({1: seq}, {0: seq}), strict=False)
    # The caches stay uninitialised memory-planned buffers (not zeros in the file): custom_sdpa reads only the
    # positions before start_pos + T, which update_cache has written in this sequence.
    edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()],
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False),
                                       constant_methods={"get_max_seq_len": length, "get_vocab_size": vocab_size})
    # quant fusion: the int8 table's dequantize + gather become quantized_decomposed::embedding_byte (as
    # optimum-executorch's XNNPACK recipe lowers it; without it ExecuTorch has no kernel for torchao's dequantize)
    return edge.to_executorch(config=ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True)).buffer
