"""Eager PyTorch: the reference every file is judged against, and ExportedPrograms (.pt2) run as modules."""

from mobilize.backends import BACKENDS
from mobilize.core.backend import Backend

BACKENDS.register("eager")(Backend(
    name="eager",
    formats={"eager": "eager", "exported_program": "eager"},
    suffixes={".pt2": "exported_program"},
    runtimes={"eager": "runtime:EagerSession"},
    complete={"exported_program": "complete:check_pt2"},
    decoders={"eager-fp32": "decoder:FP32", "eager-int8wo": "decoder:INT8_WEIGHT_ONLY"},
))
