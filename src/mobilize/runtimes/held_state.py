"""State a torch module keeps inside itself between calls (issue #48 item 4).

Silero VAD's TorchScript file keeps its recurrent state and the previous chunk's last samples in module attributes
(``self._state``, ``self._context``) that every forward writes, and starts a new stream with ``reset_states()``.
Such a model's answer depends on the calls made before: two passes over the same data differ, a file saved after
some calls carries their state, and a check that runs it once before the judged calls shifts every answer.  No
library says which attributes a TorchScript forward writes, so it is found here by what a call does: the module's
tensor attributes (not its parameters) before and after one call, and two calls on the same input.

    >>> import torch
    >>> class Counter(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.register_buffer("seen", torch.zeros(1))
    ...     def reset_states(self):
    ...         self.seen.zero_()
    ...     def forward(self, x):
    ...         self.seen += 1
    ...         return x * self.seen
    >>> keeper = StateKeeper(Counter())
    >>> held = keeper.held_state([torch.ones(1)])
    >>> held.text()
    "state kept in the module: attribute 'seen' written by forward, reset by reset_states()"
    >>> float(keeper.module.seen)  # the probe left the module as it found it
    0.0
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Sequence

RESET_NAMES = ("reset_states", "reset_state", "reset", "reset_cache", "reset_hidden", "reset_context",
               "clear_state", "clear_states", "clear_cache")
"""Methods that start a new stream, in the order they are looked for (Silero's is ``reset_states``); one that
takes an argument without a default is not called."""


@dataclasses.dataclass(frozen=True)
class HeldState:
    """What makes a module's answers depend on the calls before: the tensor attributes a forward writes (empty
    where they cannot be listed, a lite-interpreter file) and the method that starts a new stream (None: each stream
    starts from the state the file was saved with)."""

    attributes: tuple[str, ...] = ()
    reset: str | None = None

    def text(self) -> str:
        if self.attributes:
            what = f"state kept in the module: {_names(self.attributes)} written by forward"
        else:
            what = ("state kept in the module: a second call on the same input answers differently (or "
                    "randomness in forward)")
        how = f"reset by {self.reset}()" if self.reset else "no reset method, so each stream starts from the " \
                                                            "state the file was saved with"
        return f"{what}, {how}"

    def to_json(self) -> dict[str, Any]:
        return {"attributes": list(self.attributes), "reset": self.reset, "text": self.text()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "HeldState":
        return cls(tuple(data.get("attributes") or ()), data.get("reset"))


def tensor_attributes(module: Any) -> dict[str, Any]:
    """The tensors a module holds other than its parameters (buffers and plain tensor attributes), by dotted name;
    empty for a module whose attributes cannot be listed (a lite-interpreter module)."""
    import torch

    if isinstance(module, torch.jit.ScriptModule):
        found = torch._C._jit_debug_module_iterators(module._c)
        parameters = {name for name, _ in found["named_parameters_r"]}
        return {name: value for name, value in found["named_attributes_r"]
                if isinstance(value, torch.Tensor) and name not in parameters}
    if isinstance(module, torch.nn.Module):
        out: dict[str, Any] = {}
        for prefix, sub in module.named_modules():
            for key, value in list(sub._buffers.items()) + list(vars(sub).items()):
                if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                    out[f"{prefix}.{key}" if prefix else key] = value
        return out
    return {}


def snapshot(module: Any) -> dict[str, Any]:
    """A copy of :func:`tensor_attributes` (what :func:`restore` puts back)."""
    return {name: value.detach().clone() for name, value in tensor_attributes(module).items()}


def restore(module: Any, saved: dict[str, Any]) -> None:
    """Put the tensors of :func:`snapshot` back (a new tensor where a forward replaced the attribute)."""
    import torch

    for name, value in saved.items():
        *path, leaf = name.split(".")
        owner = module
        for part in path:
            owner = getattr(owner, part)
        if isinstance(owner, torch.nn.Module) and not isinstance(owner, torch.jit.ScriptModule) \
                and leaf in owner._buffers:
            owner._buffers[leaf] = value.clone()
        else:
            setattr(owner, leaf, value.clone())


def reset_method(module: Any) -> str | None:
    """The module's method that starts a new stream (:data:`RESET_NAMES`), callable without arguments."""
    import torch

    for name in RESET_NAMES:
        if isinstance(module, torch.jit.ScriptModule):
            if name not in module._c._method_names():
                continue
            arguments = module._c._get_method(name).schema.arguments[1:]
            if all(a.default_value is not None or a.has_default_value() for a in arguments):
                return name
        elif hasattr(module, "find_method"):  # a lite-interpreter module: its methods cannot be inspected
            if module.find_method(name):
                return name
        else:
            method = getattr(module, name, None)
            if callable(method) and _callable_bare(method):
                return name
    return None


def _callable_bare(method: Callable) -> bool:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in parameters)


def call_reset(module: Any, name: str) -> None:
    import torch

    with torch.no_grad():
        if hasattr(module, "run_method"):
            module.run_method(name)
        else:
            getattr(module, name)()


def changed(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, ...]:
    """Names whose tensor differs (shape, element type or values) between two snapshots."""
    import torch

    return tuple(name for name, value in before.items()
                 if name in after and (value.shape != after[name].shape or value.dtype != after[name].dtype
                                       or not torch.equal(value, after[name])))


def fresh(inputs: Sequence[Any]) -> list:
    """The inputs with each tensor copied."""
    return [t.clone() if hasattr(t, "clone") else t for t in inputs]


def differ(first: Sequence[Any], second: Sequence[Any]) -> bool:
    import torch

    return len(first) != len(second) or any(
        a.shape != b.shape or not torch.equal(a, b) for a, b in zip(first, second)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor))


class StateKeeper:
    """A torch module's held state: found by :meth:`held_state`, reset between streams by :meth:`reset_state` (its
    reset method, else the tensors it had when given, which for a file are the ones it was saved with)."""

    def __init__(self, module: Any, run: Callable[[list], Sequence[Any]] | None = None):
        self.module = module
        self.run = run or self._call
        self.reset = reset_method(module)
        self.loaded = snapshot(module)

    def _call(self, inputs: list) -> list:
        import torch

        from mobilize.runtimes.base import flatten_outputs

        with torch.inference_mode():
            return [t.detach().clone() for t in flatten_outputs(self.module(*inputs))]

    def reset_state(self) -> None:
        if self.reset:
            call_reset(self.module, self.reset)
        else:
            restore(self.module, self.loaded)

    def held_state(self, inputs: list) -> HeldState | None:
        """Whether a forward on ``inputs`` writes state the next call reads: the attributes one call changes, or a
        second call on the same input answering differently.  Leaves the module reset."""
        self.reset_state()
        before = snapshot(self.module)
        first = self.run(fresh(inputs))
        written = changed(before, snapshot(self.module))
        second = self.run(fresh(inputs))  # copies: a forward that writes its input must not read as state
        self.reset_state()
        if not written and not differ(first, second):
            return None
        return HeldState(written, self.reset)


def mid_stream(module: Any) -> tuple[str, ...]:
    """The attributes a module as given holds other than its reset method leaves (a file saved mid-stream);
    leaves the module reset.  Empty without a reset method (nothing says what a fresh stream holds)."""
    name = reset_method(module)
    if name is None:
        return ()
    before = snapshot(module)
    call_reset(module, name)
    return changed(before, snapshot(module))


class StreamStart:
    """The state an exported file starts a stream from: the model's own reset (a file saved mid-stream is reset
    first, and said), else the state it was given with.  An exporter that runs the model (a trace) changes its held
    state; :meth:`put_back` restores it before saving, so no file carries a snapshot of the export's own calls."""

    def __init__(self, module: Any, note: Callable[[str], None]):
        self.reset = reset_method(module)
        self.note = note
        self.mid = mid_stream(module)
        self.saved = snapshot(module)
        if self.mid:
            note(f"the model was saved mid-stream: {_names(self.mid)} differ from what {self.reset}() sets; reset "
                 f"before export, so this file starts a stream as a fresh one does")

    def put_back(self, module: Any) -> None:
        """Restore the stream's start on ``module`` (the program the exporter ran), saying when its calls wrote
        state (a forward that keeps state inside the module)."""
        written = changed(self.saved, snapshot(module))
        if written:
            start = f"what {self.reset}() sets" if self.reset else "the state the model was given with"
            self.note(f"forward writes {_names(written)} (state kept in the module): the export's own calls are "
                      f"undone, the file starts a stream from {start}")
            restore(module, {name: self.saved[name] for name in written})  # only these: a scripted module's
            # constants (a tensor attribute scripting froze) cannot be set


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:4]) + (" ..." if len(names) > 4 else "")
    return f"attribute{'s' if len(names) > 1 else ''} {shown}"
