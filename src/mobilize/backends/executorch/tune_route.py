"""How ``mobilize tune`` searches ExecuTorch: the built-in ``executorch-fp32`` and ``executorch-int8`` recipes,
per-module exclusion on the PT2E graph (the step's ``exclude``), and the ETDump diagnosis inside and outside the
delegate.

    >>> [s.name for s in ROUTE.starts]
    ['executorch-fp32', 'executorch-int8']
"""

from __future__ import annotations

from mobilize.core.tune_route import Exclusion, Start, TuneRoute

ROUTE = TuneRoute(
    runtime="executorch",
    starts=(Start("executorch-fp32", recipe="executorch-fp32"), Start("executorch-int8", recipe="executorch-int8")),
    fp32_twin="executorch-fp32",
    exclusion=Exclusion.MODULES,
)
