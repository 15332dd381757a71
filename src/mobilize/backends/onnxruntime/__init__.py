"""ONNX and ONNX Runtime: the ONNX exporter with ONNX Runtime quantization, the runtime, the completeness
check, the lint probe (providers' node assignment), the profiler and tune's drift localiser."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("onnxruntime")(Backend(
    name="onnxruntime",
    formats={"onnx": "onnxruntime"},
    suffixes={".onnx": "onnx", ".ort": "onnx"},
    side_files={"onnx": (".onnx.data",)},  # the weights of a model past protobuf's 2 GB, written beside it
    exporters={"onnx": "exporter:OnnxExporter"},
    runtimes={"onnxruntime": "runtime:OnnxRuntimeSession"},
    complete={"onnx": "complete:check_onnx"},
    lint_targets={"onnxruntime": "lint_probe"},
    profilers={"onnx": "profiler:profile_onnx"},
    drift={"onnx": "drift"},
    why_slow={"onnx": "why_slow:why_not_faster"},
    tune={"onnxruntime": "tune_route:ROUTE"},
    file_plans={"onnx": "onnx-file"},
    decoders={"onnx-fp32": "decoder:FP32", "onnx-int4": "decoder:INT4", "onnx-genai-fp32": "genai:FP32",
              "onnx-genai-int4": "genai:INT4", "onnx-genai-int4-mixed": "genai:INT4_MIXED"},
    conv_fused_activations=("relu", "relu6", "hardtanh", "sigmoid", "tanh", "leaky_relu", "hardsigmoid"),
    noise=("[E:onnxruntime:", "[W:onnxruntime:"),  # a failed session's reason also reaches its exception
    tools={"lint_timing": "lint_timing:measure_time", "bind_inputs": "bound:bind_inputs"},
    packages=("onnxruntime", "onnx", "onnxscript", "onnxruntime_genai"),
    dynamic_int8=({"name": "onnx-dynamic", "recipe": "onnx-dynamic"},),
))
