"""PT2E int8 for ExecuTorch with the XNNPACKQuantizer: static (calibrated), dynamic, and QAT.

Each returns the converted reference GraphModule: the float graph with quantize/dequantize
nodes that XNNPACK then runs as int8 kernels (on this host the two agree to the last bit).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Sequence

from mobilize.core.errors import ConfigError
from mobilize.lowering.pt2e import first_output
from mobilize.lowering.torch_export import capture


@dataclasses.dataclass(frozen=True)
class QatOptions:
    epochs: int = 3
    lr: float = 1e-3
    batch_size: int = 32
    max_samples: int = 1024
    seed: int = 0


def xnnpack_quantizer(per_channel: bool, dynamic: bool = False, qat: bool = False,
                      exclude: Sequence[str] = ()) -> Any:
    """The XNNPACKQuantizer; ``exclude``: qualified names of submodules whose ops it leaves unannotated (float)."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import get_symmetric_quantization_config
    from torchao.quantization.pt2e.quantizer import get_module_name_filter

    config = get_symmetric_quantization_config(is_per_channel=per_channel, is_dynamic=dynamic, is_qat=qat)
    quantizer = unconfigured_quantizer().set_global(config)
    if exclude:  # set_module_name(name, None) asserts "not supported yet"; a filter gives the same annotation
        inside = [get_module_name_filter(name) for name in exclude]
        quantizer.set_filter_function(lambda node: not any(f(node) for f in inside))
    return quantizer


def unconfigured_quantizer() -> Any:
    """mobilize's XNNPACKQuantizer with no config (it annotates nothing: the float twin of a PT2E graph, with the
    same graph transforms), :func:`xnnpack_quantizer` configures it."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer

    class Quantizer(XNNPACKQuantizer):
        """XNNPACKQuantizer that skips its conv-BatchNorm patterns when the graph has no BatchNorm left
        (always so after prepare_pt2e's PTQ fusion): each of the four traces 12 pattern graphs with
        torch.export on every call — ~12 s here — only to match nothing.  It also keeps an attention mask's
        arithmetic float (:func:`mask_arithmetic`) and integer arithmetic integer
        (:func:`scalars_to_attrs_on_floats`)."""

        def annotate(self, model):
            if not any("batch_norm" in str(n.target) for n in model.graph.nodes if n.op == "call_function"):
                self.SUPPORTED_PATTERNS = [p for p in XNNPACKQuantizer.SUPPORTED_PATTERNS if "_bn" not in p.name]
            masks = mask_arithmetic(model)
            if masks:
                user = self.filter_fn
                self.filter_fn = lambda node: node not in masks and (user is None or user(node))
            return super().annotate(model)

        def transform_for_annotation(self, model):
            return scalars_to_attrs_on_floats(model, super().transform_for_annotation)

    return Quantizer()


def mask_arithmetic(model: Any) -> set:
    """The add/mul nodes that apply a float tensor computed from integer inputs alone (an attention mask made from
    ``attention_mask`` ids: 0 where a token is kept, ``finfo.min`` where it is padding): int8 cannot hold both (a
    scale for -3.4e38 rounds every attention score to 0), so these stay float; the scores around them are
    quantized as before.  (Issue #67: a BERT-style encoder's static int8 .pte read SQNR 6 dB.)"""
    import torch

    def floating(n) -> bool:
        val = n.meta.get("val")
        return isinstance(val, torch.Tensor) and val.dtype.is_floating_point

    scalars = {n for n in model.graph.nodes if n.op == "get_attr" and floating(n) and n.meta["val"].numel() <= 1}
    from_ints: set = set()  # float values that no float input, weight or activation reaches (scalars aside)
    for n in model.graph.nodes:
        if n.op == "call_function" and floating(n) and all(a in from_ints or a in scalars or not floating(a)
                                                           for a in n.all_input_nodes):
            from_ints.add(n)
    return {n for n in model.graph.nodes if n.op == "call_function" and n not in from_ints and n.target in (
        torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor, torch.ops.aten.sub.Tensor)
        and any(a in from_ints for a in n.all_input_nodes)}


def scalars_to_attrs_on_floats(model: Any, convert: Any) -> Any:
    """XNNPACKQuantizer's ``transform_for_annotation`` (``convert``) on the float add/mul nodes only: it turns every
    add/mul's Python scalar into a float32 tensor buffer (``torch.tensor(float(x))``), so an integer add such as
    transformers' mask code ``arange(n) + kv_offset`` became float, and the ``aten.index`` it feeds failed with
    "IndexError: tensors used as indices must be long, int, byte or bool tensors" (issue #67: both ExecuTorch int8
    variants of every BERT-style encoder).  Integer arithmetic is never quantized, so those nodes are hidden from
    ``convert`` and put back as they were."""
    import operator

    import torch

    hidden = {}
    for n in model.graph.nodes:
        val = n.meta.get("val")
        if (n.op == "call_function" and n.target in (torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor)
                and isinstance(val, torch.Tensor) and not val.dtype.is_floating_point):
            hidden[n] = n.target
            n.target = operator.add if n.target is torch.ops.aten.add.Tensor else operator.mul
    model = convert(model)
    for n, target in hidden.items():
        n.target = target
    if hidden:
        model.recompile()
    return model


def quantize_static(module: Any, example: Sequence[Any], calibration: Sequence[Sequence[Any]],
                    per_channel: bool = True, exclude: Sequence[str] = ()) -> Any:
    """Observers on activations and weights, calibrated on ``calibration`` inputs, then converted;
    the submodules named in ``exclude`` stay float."""
    return calibrate_and_convert(capture(module, example).module(), xnnpack_quantizer(per_channel, exclude=exclude),
                                 calibration)


def calibrate_and_convert(graph_module: Any, quantizer: Any, calibration: Sequence[Sequence[Any]]) -> Any:
    """``prepare_pt2e`` with ``quantizer``, observe ``calibration`` inputs, ``convert_pt2e``."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(graph_module, quantizer)
    with torch.no_grad():
        for inputs in calibration:
            prepared(*inputs)
    return convert_pt2e(prepared)


def quantize_dynamic(module: Any, example: Sequence[Any], per_channel: bool = True, exclude: Sequence[str] = ()) -> Any:
    """int8 weights; activations quantized at run time from their own range (Linear-heavy models)."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(capture(module, example).module(),
                            xnnpack_quantizer(per_channel, dynamic=True, exclude=exclude))
    with torch.no_grad():
        prepared(*example)
    return convert_pt2e(prepared)


def quantize_qat(module: Any, spec: Any, data: Any, options: QatOptions, per_channel: bool = True,
                 exclude: Sequence[str] = ()) -> tuple[Any, str]:
    """Fake-quantize, fine-tune with cross-entropy on labelled batches, convert; the given module is untouched."""
    import torch
    from torchao.quantization.pt2e import move_exported_model_to_eval, move_exported_model_to_train
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e

    if data is None or not getattr(data, "labelled", False):
        raise ConfigError("quantize: qat fine-tunes on labelled data, and the data source has no labels",
                          hint="give --data with labels: digits, a folder with one subfolder per class, or an .npz with y")
    batches = [(x, y) for x, y in data.batches(spec, limit=options.max_samples, batch_size=options.batch_size)
               if len(y) > 1]  # batch norm in training mode needs two samples
    if not batches:
        raise ConfigError(f"quantize: qat needs at least 2 labelled samples; {data.reference} gave fewer")
    batch_dim = torch.export.Dim("batch", min=1, max=max(1024, options.batch_size))
    graph = capture(copy.deepcopy(module), (batches[0][0],), dynamic_shapes=({0: batch_dim},)).module()
    prepared = prepare_qat_pt2e(graph, xnnpack_quantizer(per_channel, qat=True, exclude=exclude))
    move_exported_model_to_train(prepared)
    optimizer = torch.optim.SGD(prepared.parameters(), lr=options.lr, momentum=0.9)
    order = torch.Generator().manual_seed(options.seed)
    losses = []
    for _ in range(options.epochs):
        total = 0.0
        for i in torch.randperm(len(batches), generator=order).tolist():
            x, y = batches[i]
            logits = first_output(prepared(x))
            if logits.dim() != 2 or logits.shape[1] <= int(y.max()):
                raise ConfigError(f"quantize: qat trains a classifier, but the model's output is {tuple(logits.shape)} "
                                  f"for labels up to {int(y.max())}", hint="use a data source whose labels fit the model")
            loss = torch.nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss) * len(y)
        losses.append(total / sum(len(y) for _, y in batches))
    move_exported_model_to_eval(prepared)
    samples = sum(len(y) for _, y in batches)
    note = (f"qat: fine-tuned {options.epochs} epoch(s) on {samples} labelled samples from {data.reference} "
            f"(loss {losses[0]:.3f} -> {losses[-1]:.3f})")
    return convert_pt2e(prepared), note


