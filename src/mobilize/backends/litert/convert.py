"""PyTorch → ``.tflite`` with litert-torch: PT2E int8 (static or dynamic range), NHWC inputs, fp16 weights.

Private helpers of the ``litert`` exporter.  Each stage fails with a one-line ExportError that
names it (``export``, ``quantize``, ``convert``, ``fp16``); the converter's progress lines and
MLIR logs are kept out of the user's terminal (its warnings come back as notes).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Sequence

from mobilize.core.errors import ExportError, translate_errors

FP16_WEIGHT_OPS = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D_TRANSPOSE", "EMBEDDING_LOOKUP")
"""The ops whose weights ai-edge-quantizer's float_casting stores as fp16 (dequantized once at load)."""
_NOISE = ("[START]", "[ DONE]", "I0000", "W0000", "Estimated count of arithmetic ops", "Created TensorFlow Lite",
          "converted in training mode", "FutureWarning", "return cls.__new__", "LeafSpec", "_pytree.py",
          "absl::InitializeLog")


def pt2e_quantize(module: Any, example: Sequence[Any], calibration: Sequence[Sequence[Any]], *, per_channel: bool,
                  dynamic: bool) -> tuple[Any, Any]:
    """torch.export → prepare_pt2e with litert-torch's PT2EQuantizer → calibrate → convert (eval mode)."""
    import torch

    _import_litert_torch()
    from litert_torch.quantize import pt2e_quantizer as pq
    from torchao.quantization.pt2e import move_exported_model_to_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from mobilize.lowering.torch_export import capture

    quantizer = litert_quantizer().set_global(
        pq.get_symmetric_quantization_config(is_per_channel=per_channel, is_dynamic=dynamic))
    graph = capture(module, example).module()
    what = f"PT2E {'dynamic' if dynamic else 'static'} int8"
    # torchao raises many types; the first line says what
    with translate_errors(ExportError, what, stage="quantize",
                          message=lambda exc: f"{what} failed: {type(exc).__name__}: {_first_line(exc)}"), \
            _quiet_python():
        prepared = prepare_pt2e(graph, quantizer)
        with torch.no_grad():
            for inputs in calibration if not dynamic else [example]:
                prepared(*inputs)
        converted = convert_pt2e(prepared, fold_quantize=False)
        move_exported_model_to_eval(converted)
    return converted, quantizer


def litert_quantizer() -> Any:
    """litert-torch's PT2EQuantizer that also annotates the tensor adds it misses.

    It finds adds by their source function (``operator.add``, ``torch.add``); an add through torch.ao's
    ``FloatFunctional`` (torchvision's quantizable models, mobilize's zoo MobileNetV2) has the module as
    its source, stays unannotated, and runs in float32 between DEQUANTIZE and QUANTIZE (9 of MobileNetV2's
    10 residual adds).  ``added`` counts the adds annotated here, with the same specs as its own."""
    import torch
    from litert_torch.quantize import pt2e_quantizer as pq
    from litert_torch.quantize.pt2e_quantizer_utils import get_input_act_qspec, get_output_act_qspec
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation

    class Quantizer(pq.PT2EQuantizer):
        added = 0

        def _annotate_all_static_patterns(self, model, quantization_config, filter_fn=None):
            model = super()._annotate_all_static_patterns(model, quantization_config, filter_fn)
            if quantization_config is None:
                return model
            for node in model.graph.nodes:
                if (node.op != "call_function" or node.target != torch.ops.aten.add.Tensor
                        or "quantization_annotation" in node.meta or (filter_fn and not filter_fn(node))):
                    continue
                inputs = node.args[:2]
                if not all(isinstance(a, torch.fx.Node) and a.op == "call_function" for a in inputs):
                    continue  # activations only: a constant operand keeps the quantizer's own handling
                node.meta["quantization_annotation"] = QuantizationAnnotation(
                    input_qspec_map={a: get_input_act_qspec(quantization_config) for a in inputs},
                    output_qspec=get_output_act_qspec(quantization_config), _annotated=True)
                self.added += 1
            return model

    return Quantizer()


def to_tflite(module: Any, example: Sequence[Any], quantizer: Any = None,
              nhwc_inputs: Sequence[int] = ()) -> tuple[bytes, list[str]]:
    """litert_torch.convert (on a channels-last IO wrapper for ``nhwc_inputs``) → flatbuffer bytes, notes."""
    from mobilize.lowering.torch_export import capture, stage_error
    from mobilize.lowering.onnx_export import native_output

    _import_litert_torch()
    import litert_torch
    from litert_torch.quantize.quant_config import QuantConfig

    lines: list[str] = []
    args = list(example)
    if nhwc_inputs:
        module = litert_torch.to_channel_last_io(module, args=list(nhwc_inputs))
        args = [a.permute(0, *range(2, a.dim()), 1).contiguous() if i in nhwc_inputs else a for i, a in enumerate(args)]
    if quantizer is None:
        capture(module, args)  # torch.export's own errors, with the user's source line, before the converter's
    def failed(exc: Exception) -> ExportError:  # the converter raises RuntimeError, ValueError, MLIR errors ...
        err = stage_error("convert", exc)
        detail = next((ln for ln in lines if "error" in ln.lower() and ln.strip()), "")
        if detail and detail not in err.message:
            err.message += f" (converter: {detail.strip()[:200]})"
        return err

    with translate_errors(failed, "the LiteRT converter"), native_output(lines), _quiet_python():
        edge = litert_torch.convert(module, tuple(args),
                                    quant_config=QuantConfig(pt2e_quantizer=quantizer) if quantizer else None)
        data = edge.model_content()
    notes = sorted({f"converter: {ln.strip()[:200]}" for ln in lines
                    if ln.strip() and ("warning" in ln.lower() or "error" in ln.lower())
                    and not any(n in ln for n in _NOISE)})
    return bytes(data), notes


def fp16_weights(data: bytes) -> bytes:
    """Store conv / fully-connected weights as float16 (ai-edge-quantizer's float_casting, weight-only)."""
    from ai_edge_quantizer import quantizer as aeq

    recipe = [{"regex": ".*", "operation": op, "algorithm_key": "float_casting",
               "op_config": {"weight_tensor_config": {"num_bits": 16, "dtype": "FLOAT"},
                             "compute_precision": "FLOAT", "explicit_dequantize": True}} for op in FP16_WEIGHT_OPS]
    # ai-edge-quantizer raises ValueError/RuntimeError with its reason
    with translate_errors(ExportError, "fp16 weights", stage="fp16",
                          message=lambda exc: f"fp16 weights failed: {type(exc).__name__}: {_first_line(exc)}"), \
            _quiet_python():
        result = aeq.Quantizer(bytearray(data), recipe).quantize(enable_progress_report=False)
    return bytes(result.quantized_model)


def _import_litert_torch() -> None:
    """The first import of litert-torch logs native start-up lines (absl, oneDNN) to stdout and stderr."""
    import sys

    if "litert_torch" in sys.modules:
        return
    from mobilize.lowering.onnx_export import native_output

    with native_output([]), _quiet_python():
        import litert_torch  # noqa: F401


@contextlib.contextmanager
def _quiet_python():
    """Python warnings about converter internals (deprecations, pytree changes) users cannot act on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."
