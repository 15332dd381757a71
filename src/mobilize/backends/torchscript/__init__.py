"""TorchScript (.pt) and the lite interpreter (.ptl): exporters, runtimes, archive checks."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("torchscript")(Backend(
    name="torchscript",
    formats={"torchscript": "torchscript", "lite": "lite"},
    suffixes={".pt": "torchscript", ".pth": "torchscript", ".jit": "torchscript", ".ptl": "lite"},
    exporters={"torchscript": "exporter:TorchScriptExporter", "lite": "lite_exporter:LiteExporter"},
    runtimes={"torchscript": "runtime:TorchScriptSession", "lite": "lite_runtime:LiteSession"},
    complete={"torchscript": "complete:check_archive", "lite": "complete:check_archive"},
    native={"torchscript": "native_runner:RUNNER", "lite": "native_runner:RUNNER"},
    torch_archives=("torchscript", "lite"),
    file_plans={"torchscript": "torchscript-file"},
    tools={"bind_inputs": "bound:bind_inputs"},
))
