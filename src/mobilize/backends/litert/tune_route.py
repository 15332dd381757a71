"""How ``mobilize tune`` searches LiteRT: the built-in ``litert-fp32`` and ``litert-int8`` recipes (no per-layer
exclusion, no why-not-faster diagnosis: LiteRT has neither a drift localiser nor a profiler here).

    >>> [s.name for s in ROUTE.starts]
    ['litert-fp32', 'litert-int8']
"""

from __future__ import annotations

from mobilize.core.tune_route import Start, TuneRoute

ROUTE = TuneRoute(
    runtime="litert",
    starts=(Start("litert-fp32", recipe="litert-fp32"), Start("litert-int8", recipe="litert-int8")),
    fp32_twin="litert-fp32",
)
