"""Calibration samples of a stateful model: the states it really carries (issue #40 item 8's follow-up).

A stateful model (an input and an output of one shape: Silero VAD's ``state``) runs as a stream, each call's state
the output of the call before.  Calibrated on the data's samples as they are, every state input is the zero a
stream starts from, and static int8 learns the ranges of a state it never sees again: a voice-activity file that
passes its single-call check at 39.5 dB falls to 2.8 dB streamed, half its decisions flipped.  :class:`StateCarrier`
runs the float model over the calibration samples in order and gives each call with the state that call received;
the build sets one on the context, so every engine's static int8 (ONNX Runtime, ExecuTorch PT2E, OpenVINO/NNCF,
LiteRT, eager) calibrates on the same stream through :meth:`mobilize.core.context.Context.calibration_inputs`.

    >>> import torch
    >>> from mobilize.core.inputs import InputSpec
    >>> class Integrator(torch.nn.Module):
    ...     def forward(self, x, state):
    ...         return x.sum(1, keepdim=True), state + x
    >>> carrier = StateCarrier(Integrator(), [InputSpec((1, 2)), InputSpec((1, 2))], ["x", "state"])
    >>> calls, said = carrier([[torch.ones(1, 2), torch.zeros(1, 2)] for _ in range(3)])
    >>> [c[1].tolist() for c in calls]
    [[[0.0, 0.0]], [[1.0, 1.0]], [[2.0, 2.0]]]
    >>> said
    "a stateful model (input 'state' <- output 1): calibrated on the states carried over 3 calls (each call's state the float model's output of the call before, from a zero state), not on the data's states"
"""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.core.inputs import InputSpec


class StateCarrier:
    """The calibration stream of ``model`` (a module or a file), found on first use: the samples as they are for a
    model without state (one call to tell, none for a model of one input)."""

    def __init__(self, model: Any, specs: Sequence[InputSpec], names: Sequence[str] = ()) -> None:
        self.model = model
        self.specs = list(specs)
        self.names = list(names)
        self._pairs: list[tuple[int, int]] | None = None if len(self.specs) > 1 else []

    def __call__(self, samples: list[list]) -> tuple[list[list], str | None]:
        from mobilize.accuracy.stream import carried_inputs, describe_pairs, state_pairs, zero_state

        if self._pairs == []:
            return samples, None
        with _Runner(self.model) as run:
            if self._pairs is None:
                self._pairs = state_pairs(self.specs, run(list(samples[0])))
                if not self._pairs:
                    return samples, None
            calls = carried_inputs(run, zero_state(samples, self._pairs), self._pairs)
            names = self.names or run.input_names(len(self.specs))
        return calls, (f"a stateful model ({describe_pairs(self._pairs, names)}): calibrated on the states "
                       f"carried over {len(calls)} calls (each call's state the float model's output of the call "
                       f"before, from a zero state), not on the data's states")


class _Runner:
    """The float model as ``inputs -> list of output tensors``: a module under inference mode, or a file in its
    format's default runtime (opened for the stream, closed after)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.session: Any = None

    def __enter__(self) -> "_Runner":
        if not hasattr(self.model, "forward"):
            from mobilize.runtimes.base import open_session

            self.session = open_session(self.model, threads=1)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def input_names(self, count: int) -> list[str]:
        """The model's input names as the file or the forward declares them (``[]`` when it does not)."""
        if self.session is not None:
            return list(self.session.declared_input_names())
        from mobilize.sources.bound import tensor_input_names

        return tensor_input_names(self.model, count)

    def __call__(self, inputs: list) -> list:
        import torch

        from mobilize.runtimes.base import flatten_outputs

        if self.session is not None:
            return list(self.session.run(inputs))
        with torch.inference_mode():
            return [t.detach().clone() for t in flatten_outputs(self.model(*inputs))]
