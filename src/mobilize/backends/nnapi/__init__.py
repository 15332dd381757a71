"""Android NNAPI: the converter-based exporter with CPU twins, the host interpreter (runtime nnapi_host), the
host check against the twin, the op-support probe, the adb script and the device log reader."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("nnapi")(Backend(
    name="nnapi",
    formats={"nnapi": "nnapi_host"},
    exporters={"nnapi": "exporter:NnapiExporter"},
    runtimes={"nnapi_host": "runtime:NnapiHostSession"},
    claims={"nnapi": "nnapi_format:claims_file"},
    complete={"nnapi": "complete:check_archive"},
    lint_targets={"nnapi": "lint_probe"},
    tools={"from_log": "adb:report_from_log", "format_log_report": "adb:format_report"},
    host_only={"nnapi": "NNAPI runs on Android only: its numbers are checked on the host interpreter, not on arm64"},
    contract={"nnapi_host": "nnapi"},
))
