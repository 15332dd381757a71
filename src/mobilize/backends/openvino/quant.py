"""NNCF post-training int8 for OpenVINO IR: statistics on real samples, FakeQuantize on weights and activations.

Private helper of the ``openvino`` exporter.  NNCF prints progress bars and INFO lines; they are
kept out of the terminal, its warnings come back as notes.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

from mobilize.core.errors import ExportError, headline, translate_errors


def nncf_quantize(model: Any, samples: Sequence[Sequence[Any]], preset: str, fast_bias_correction: bool,
                  minmax: bool = True, overflow_fix: bool = False) -> tuple[Any, list[str]]:
    """``minmax``: activation ranges from the min and max over all samples (else NNCF's averaged quantiles).
    ``overflow_fix``: every layer's weights in half the 8-bit range (else NNCF's default, the first layer only)."""
    from mobilize.lowering.onnx_export import native_output

    lines: list[str] = []
    items = [inputs[0].detach().contiguous().numpy() if len(inputs) == 1 else  # several inputs: one tuple each
             tuple(t.detach().contiguous().numpy() for t in inputs) for inputs in samples]
    # nncf raises its own error types with the reason in the first line
    what = "NNCF int8 quantization"
    with translate_errors(ExportError, what, stage="quantize",
                          message=lambda exc: f"{what} failed: {type(exc).__name__}: {headline(exc)[:300]}"), \
            native_output(lines), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import nncf
        from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix
        from nncf.quantization.range_estimator import RangeEstimatorParametersSet

        advanced = AdvancedQuantizationParameters(overflow_fix=OverflowFix.ENABLE if overflow_fix else None)
        if minmax:
            advanced.activations_range_estimator_params = RangeEstimatorParametersSet.MINMAX
        encoder = encoder_ops(model)
        quantized = nncf.quantize(
            model, nncf.Dataset(items), subset_size=len(items),
            preset=nncf.QuantizationPreset.PERFORMANCE if preset == "performance" else nncf.QuantizationPreset.MIXED,
            model_type=nncf.ModelType.TRANSFORMER if encoder else None,
            fast_bias_correction=fast_bias_correction, advanced_parameters=advanced)
    notes = sorted({f"nncf: {ln.strip()[:200]}" for ln in lines if "WARNING" in ln and ln.strip()})
    if encoder:
        notes.insert(0, f"encoder ({encoder}): NNCF's ModelType.TRANSFORMER (LayerNorm, Softmax, the residual adds "
                        f"and other elementwise ops kept float, SmoothQuant on the MatMuls), as NNCF asks for "
                        f"transformers")
    return quantized, notes


def encoder_ops(model: Any) -> str | None:
    """The op counts that make an OpenVINO model a Linear-heavy encoder (MatMul outnumber convolutions, beside an
    MVN - OpenVINO's LayerNorm - and a Softmax), else None."""
    import collections

    kinds = collections.Counter(op.get_type_name() for op in model.get_ops())
    convs = kinds["Convolution"] + kinds["GroupConvolution"]
    if kinds["MatMul"] > convs and kinds["MVN"] and kinds["Softmax"]:
        return f"{kinds['MatMul']} MatMul, {convs} convolution, {kinds['MVN']} MVN, {kinds['Softmax']} Softmax"
    return None

