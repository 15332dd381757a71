"""Time-weighted profiles: per-op time, and the share spent inside vs outside the delegate.

ExecuTorch files are timed with ETDump, ONNX files with ONNX Runtime's profiler
(:mod:`mobilize.backends.executorch.profiler`, :mod:`mobilize.backends.onnxruntime.profiler`); both give one
:class:`TimeProfile`.  This package measures (like ``bench``): it may use formats and runtimes,
never exporters or passes.
"""

from mobilize.profile.core import FEW_OPS, FEW_OPS_PERCENT, OUTSIDE_PERCENT, OpTime, TimeProfile
from mobilize.profile.run import check_profilable, profile_file, time_notes

__all__ = ["FEW_OPS", "FEW_OPS_PERCENT", "OUTSIDE_PERCENT", "OpTime", "TimeProfile", "check_profilable",
           "profile_file", "time_notes"]
