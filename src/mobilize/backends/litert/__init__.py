"""LiteRT (.tflite): the litert-torch exporter (fp32, int8, fp16 weights, NHWC), the interpreter runtime, the
flatbuffer reader and the lint probe."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("litert")(Backend(
    name="litert",
    formats={"tflite": "litert"},
    suffixes={".tflite": "tflite"},
    exporters={"litert": "exporter:LiteRTExporter"},
    runtimes={"litert": "runtime:LiteRTSession"},
    lint_targets={"litert": "lint_probe"},
    tune={"litert": "tune_route:ROUTE"},
    decoders={"litert-fp32": "decoder:FP32", "litert-int4": "decoder:INT4"},
    noise=("Created TensorFlow Lite XNNPACK delegate", "node(s) with delegate", "INFO: ",
           # CompiledModel's start-up: the accelerators and vendor compiler plugins it looks for and does not need
           "npu_registry.cc", "compiler_plugin.cc", "libLiteRtCompilerPlugin"),
    packages=("ai_edge_litert", "litert_torch"),
))
