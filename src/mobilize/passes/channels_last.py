"""``channels_last``: convert the model's weights to NHWC and declare NHWC inputs.
"""

from __future__ import annotations

import dataclasses

import torch

from mobilize.passes import PASSES
from mobilize.passes.base import Context, Pass, PassConfig
from mobilize.core.inputs import MemoryFormat


@PASSES.register("channels_last")
class ChannelsLast(Pass):
    name = "channels_last"
    Config = PassConfig

    def run(self, module: torch.nn.Module, ctx: Context) -> torch.nn.Module:
        module = module.to(memory_format=torch.channels_last)
        converted = []
        for i, spec in enumerate(ctx.input_specs):
            if len(spec.shape) == 4:
                ctx.input_specs[i] = dataclasses.replace(spec, memory_format=MemoryFormat.CHANNELS_LAST)
                converted.append(i)
        ctx.note(self.name, f"weights in channels-last; inputs {converted or 'none'} declared channels-last")
        ctx.channels_last = True
        return module
