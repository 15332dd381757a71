"""OpenVINO: IR (.xml + .bin) exporter (f32, f16, bf16, NNCF int8) and the CPU-plugin runtime (also runs .onnx)."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("openvino")(Backend(
    name="openvino",
    file_plans={"openvino": "openvino-file"},
    decoders={"openvino-fp32": "decoder:FP32", "openvino-int8": "decoder:INT8", "openvino-int4": "decoder:INT4",
              "optimum-intel-int4": "decoder:OPTIMUM_INT4"},
    formats={"openvino": "openvino"},
    suffixes={".xml": "openvino"},
    side_files={"openvino": (".bin",)},
    complete={"openvino": "complete:check_ir"},
    exporters={"openvino": "exporter:OpenVinoExporter"},
    runtimes={"openvino": "runtime:OpenVinoSession"},
    packages=("openvino", "nncf"),
))
