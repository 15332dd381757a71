"""Typed pipeline state shared by passes, exporters and the build: what flows beside the module.

Passes record facts here as fields (``ctx.quant.quantized``, ``ctx.fused``), never as string
keys, so a reader finds every writer and reader of a fact with one search.

    >>> from mobilize.core.context import Context
    >>> from mobilize.core.inputs import InputSpec
    >>> ctx = Context(input_specs=[InputSpec((1, 3, 32, 32))])
    >>> ctx.quant.quantized, ctx.target.name
    (False, 'host')
    >>> ctx.note("fuse", "fused 3 Conv-BN"); ctx.notes
    ['fuse: fused 3 Conv-BN']
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from mobilize.core.errors import ConfigError
from mobilize.core.inputs import InputSpec, make_random_inputs
from mobilize.core.target import Target, host_target


@dataclasses.dataclass
class QuantState:
    """What a quantize pass did to the module (eager ``torch.ao.quantization``)."""

    quantized: bool = False
    engine: str | None = None
    """Kernel library the int8 module targets: x86, fbgemm, qnnpack."""
    interface: str | None = None
    """none, core (float in/out) or full (quantized in/out)."""
    mode: str | None = None
    """static, dynamic or qat."""
    input_qparams: tuple[float, int] | None = None
    """(scale, zero_point) a ``full`` interface expects its quint8 input in."""
    calibration_samples: int = 0


@dataclasses.dataclass
class Context:
    """What flows beside the module through passes and exporters."""

    input_specs: list[InputSpec] = dataclasses.field(default_factory=list)
    input_names: list[str] = dataclasses.field(default_factory=list)
    """The forward's tensor parameter names, in order: an .npz with arrays of these names feeds them."""
    bound_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Non-tensor forward arguments bound by name (``--input sr=16000``); recorded in every manifest."""
    data: Any = None
    """A DataSource for calibration (None: no real data)."""
    state_carrier: Callable[[list[list]], tuple[list[list], str | None]] | None = None
    """A stateful model's calibration stream (the build sets it: :mod:`mobilize.pipeline.calibration`): the samples
    in order, each state input replaced by the state the float model carried into that call, and a note saying so
    (None and the samples as they are for a model without state)."""
    target: Target = dataclasses.field(default_factory=host_target)
    """The device the artifacts are for; decides CPU-dependent choices (reduce_range, int8 engine)."""
    applied: list[str] = dataclasses.field(default_factory=list)
    """Names of the steps run so far, in order."""
    notes: list[str] = dataclasses.field(default_factory=list)
    timings_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    quant: QuantState = dataclasses.field(default_factory=QuantState)
    fused: dict[str, int] | None = None
    """Counts of fused patterns (conv_bn, conv_bn_relu, conv_relu, linear_relu) once ``fuse`` ran."""
    channels_last: bool = False
    changed_model: str | None = None
    """What a pass changed in the model itself (e.g. "structured pruning 30% of the MACs, fine-tuned"), or None:
    the variant is then judged as a changed model (``Kind.CHANGED``), not by an arithmetic floor."""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Structured facts passes leave for the report, one key per pass (e.g. ``prune``: parameters, MACs,
    sparsity); compare copies them into the variant's result."""

    def note(self, step: str, text: str) -> None:
        self.notes.append(f"{step}: {text}")

    def example_inputs(self, seed: int = 0) -> list:
        if not self.input_specs:
            raise ConfigError("the model's input shape is unknown", hint='give --input_dims, e.g. "1,3,224,224"')
        return make_random_inputs(self.input_specs, seed)

    def calibration_inputs(self, limit: int) -> list[list]:
        """Real samples when a data source is given (an .npz's arrays matched by the forward's parameter names,
        or x0, x1, ...), else a note and seeded random inputs."""
        if self.data is not None and self.data.inputs_per_sample == len(self.input_specs):
            return self.carried_states(self.data.sample_lists(self.input_specs, limit, self.input_names or None))
        why = ("no data source" if self.data is None else
               f"'{self.data.reference}' feeds {self.data.inputs_per_sample} input(s), the model takes {len(self.input_specs)}")
        self.note("data", f"{why}: using {min(limit, 8)} seeded random inputs (give --data for real samples)")
        return self.carried_states([self.example_inputs(seed) for seed in range(min(limit, 8))])

    def carried_states(self, samples: list[list]) -> list[list]:
        """``samples`` as calibration sees them: a stateful model's in order with the states its float model
        carries (noted once), anything else's as they are.  One sample (an export's example input) is a stream's
        first call: nothing is carried into it."""
        if self.state_carrier is None or len(samples) < 2:
            return samples
        samples, said = self.state_carrier(samples)
        if said and f"calibration: {said}" not in self.notes:
            self.note("calibration", said)
        return samples

    @property
    def calibration_source(self) -> str:
        """Where calibration samples come from, for notes: the data source, or seeded random inputs."""
        if self.data is not None and self.data.inputs_per_sample == len(self.input_specs):
            return f"'{self.data.reference}'"
        return "seeded random inputs"

    def calibration_batches(self, limit: int) -> list[list]:
        """:meth:`calibration_inputs` stacked to the input specs' batch size (data samples come one at a time);
        a last incomplete batch is dropped.  Scalar (0-d) inputs are taken from each batch's first sample."""
        import torch

        samples = self.calibration_inputs(limit)
        batch = self.input_specs[0].shape[0] if self.input_specs and self.input_specs[0].shape else 1
        if batch <= 1 or not samples or not samples[0] or samples[0][0].dim() == 0 or samples[0][0].shape[0] != 1:
            return samples
        stacked = []
        for i in range(0, len(samples) - batch + 1, batch):
            group = samples[i:i + batch]
            stacked.append([torch.cat([s[k] for s in group]) if group[0][k].dim() else group[0][k]
                            for k in range(len(group[0]))])
        return stacked or [self.example_inputs()]
