"""ExecuTorch (.pte, bundled .bpte) with the XNNPACK delegate: exporter (PT2E int8, fp16, bundled programs),
runtime, program reader, delegation report, lint probe (XnnpackPartitioner), ETDump profiler, tune's drift
localiser, and what the native runner needs."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("executorch")(Backend(
    name="executorch",
    formats={"executorch": "executorch"},
    suffixes={".pte": "executorch", ".bpte": "executorch"},
    exporters={"executorch": "exporter:ExecuTorchExporter"},
    runtimes={"executorch": "runtime:ExecuTorchSession"},
    complete={"executorch": "pte:check_complete"},
    lint_targets={"xnnpack": "lint_probe"},
    profilers={"executorch": "profiler:profile_pte"},
    drift={"executorch": "drift"},
    why_slow={"executorch": "why_slow:why_not_faster"},
    noise=("threadpool.cpp", "Failed to load /", "KernelPreference",
           "[method.cpp:", "No temp allocator provided"),  # what a failed run logs, the runtime's checks say in the error itself
    tune={"executorch": "tune_route:ROUTE"},
    native={"executorch": "native_runner:RUNNER"},
    decoders={"executorch-fp32": "decoder:FP32", "executorch-8da4w": "decoder:INT4_8DA4W",
              "optimum-executorch-8da4w": "decoder:OPTIMUM_8DA4W"},
    compare_profile=("executorch",),
    conv_fused_activations=("relu", "relu6", "hardtanh"),  # XNNPACK folds output clamps only
    delegate_hint="the delegation report gives its source line",
    packages=("executorch", "torchao"),
    dynamic_int8=({"name": "executorch-int8-dynamic",
                   "exports": [{"executorch": {"quantize": "int8_dynamic", "per_channel": True}}]},),
))
