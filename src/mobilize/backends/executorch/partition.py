"""The XNNPACK partitioner mobilize lowers with: ExecuTorch's own, with PReLU on a non-4-D input kept out.

ExecuTorch 1.5's ``ChannelsLastTaggedReshapePass`` treats every PReLU in the delegate as an op whose input must be
NHWC, so a PReLU after a Linear (a 2-D input, as in MTCNN's ONet) stops lowering with "Attempting to convert
non-NHWC compatible node to NHWC" (fixed upstream by pytorch/executorch#18624).  A PReLU whose input is not 4-D
is left to ExecuTorch's own kernels instead (decomposed to gt + where + mul): the same numbers, and a note says
so.  Uses the partitioner's documented ``configs`` argument, nothing private (tests/backends/executorch/test_executorch_prelu.py
lowers an ONet-style model with it).
"""

from __future__ import annotations

from typing import Any

from mobilize.lowering.graph import source_location


def xnnpack_partitioner(notes: list[str]) -> Any:
    """``XnnpackPartitioner`` with every default config, PReLU limited to 4-D inputs; what it kept out goes to
    ``notes`` (once per node)."""
    from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
    from executorch.backends.xnnpack.partition.config.node_configs import PreluConfig
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    seen: set[str] = set()

    class Prelu4d(PreluConfig):
        def check_constraints(self, node: Any, ep: Any) -> bool:
            value = node.all_input_nodes[0].meta.get("val") if node.all_input_nodes else None
            rank = len(getattr(value, "shape", ()))
            if value is not None and rank != 4:
                if node.name not in seen:
                    seen.add(node.name)
                    loc = source_location(node)
                    at = f" (from {loc['location']}: `{loc['code']}`)" if loc else ""
                    notes.append(f"PReLU on a {rank}-D input{at} runs outside XNNPACK, on ExecuTorch's own kernels: "
                                 f"ExecuTorch's ChannelsLastTaggedReshapePass takes every delegated PReLU input as "
                                 f"4-D NHWC and fails on others (pytorch/executorch#18624)")
                return False
            return super().check_constraints(node, ep)

    return XnnpackPartitioner(configs=[Prelu4d if c is PreluConfig else c for c in ALL_PARTITIONER_CONFIGS])
