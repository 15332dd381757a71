"""How ``mobilize tune`` searches ONNX Runtime: ONNX fp32, and static int8 with MinMax, Entropy and Percentile
calibration, each quantizing the fp32 file built once; per-node exclusion; the operator profile diagnosis; the
``reduce_range`` stock default measured beside mobilize's choice.

    >>> [s.name for s in ROUTE.starts]
    ['onnx-fp32', 'onnx-int8-minmax', 'onnx-int8-entropy', 'onnx-int8-percentile']
"""

from __future__ import annotations

from mobilize.core.tune_route import Exclusion, Start, TuneRoute

CALIBRATIONS = ("minmax", "entropy", "percentile")
PRUNED = ("minmax",)
"""The calibrations each ``--prune`` level repeats (the others would triple the ONNX int8 builds for little:
MinMax is the one that kept top-1 on the default model)."""

ROUTE = TuneRoute(
    runtime="onnxruntime",
    starts=(Start("onnx-fp32", export="onnx"),
            *(Start(f"onnx-int8-{cal}", export="onnx", options={"quantize": "static", "calibration": cal},
                    calibrated=True, prune=cal in PRUNED) for cal in CALIBRATIONS)),
    fp32_twin="onnx-fp32",
    int8_from_fp32_file=True,
    exclusion=Exclusion.NODES,
    stock_reduce_range=True,
    default=True,  # the quickest search that gains on the most CPUs: static int8 runs on VNNI and non-VNNI x86 alike
)
