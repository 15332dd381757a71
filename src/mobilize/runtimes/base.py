"""The one Session interface every runtime implements.

The base class owns the cross-cutting work: checking the backend is installed, validating
inputs against what the model declares, turning the first failure into a user error that
names the input spec, and converting outputs to torch tensors.  A runtime implements
``_load``, ``prepare``, ``run_prepared`` and ``set_threads``.

Two units of time (:class:`Unit`): ``file`` times ``run_prepared`` on inputs ``prepare`` converted once (what
the file alone costs when an app feeds it its own element type and layout); ``same-work`` times
``run_float``: from the reference's float tensors to a float answer, the file's own conversions (quantize
with its scale and zero point, NCHW to NHWC, dequantize the outputs) inside the call, as an app does them.
A file whose :meth:`Session.interface` takes and gives the reference's float tensors converts nothing, so
both units are the same call (:func:`timed_call`).

    >>> from mobilize.runtimes.base import open_session
    >>> from mobilize.sources.models import resolve_model
    >>> session = open_session(resolve_model("zoo:conv_bn_relu"), threads=1)
    >>> session.name, [tuple(o.shape) for o in session.run(session.example_inputs())]
    ('eager', [(1, 5, 222, 222)])
    >>> session.close()
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import importlib
import inspect
import re
from typing import Any, Callable, ClassVar, Sequence

from mobilize.core.artifact import Format
from mobilize.core.runtime_options import RuntimeOptions, check_options  # noqa: F401  (re-exported)
from mobilize.core.errors import ConfigError, UserError, translate_errors
from mobilize.core.packages import require
from mobilize.core.inputs import InputSpec, MemoryFormat, input_type_name, make_random_inputs, shape_text


class Unit(enum.StrEnum):
    """What a timed call covers (see the module docstring)."""

    SAME_WORK = "same-work"
    """From the reference's float input to a float answer, the file's own conversions inside the call."""
    FILE = "file"
    """The file alone, on inputs already converted to what it takes."""

    @property
    def label(self) -> str:
        return "same work (float in, float out, conversions timed)" if self is Unit.SAME_WORK else "file alone"


@dataclasses.dataclass(frozen=True)
class TensorInterface:
    """One input or output of a file as the file takes or gives it."""

    dtype: str
    """Element type: float, int8, uint8, int32 ..."""
    layout: str = "-"
    """NCHW or NHWC for a 4-d tensor, - otherwise (or when the file does not say)."""
    conversion: str = ""
    """What turns the reference's float tensor into this one (an input) or this into a float answer (an output);
    empty: none."""

    def text(self) -> str:
        return self.dtype + (f" {self.layout}" if self.layout != "-" else "")


@dataclasses.dataclass(frozen=True)
class Interface:
    """A file's inputs and outputs as it takes and gives them, against the reference's float tensors."""

    inputs: tuple[TensorInterface, ...]
    """Empty: a file that declares no inputs (TorchScript) takes the reference's tensors as given."""
    outputs: tuple[TensorInterface, ...] = ()
    """Empty: float answers as the reference gives them."""

    @property
    def converts(self) -> bool:
        return any(t.conversion for t in self.inputs + self.outputs)

    def text(self) -> str:
        """Short, for the table: ``int8 NHWC->int8`` (inputs -> outputs)."""
        def side(ts: tuple[TensorInterface, ...]) -> str:
            kinds = list(dict.fromkeys(t.text() for t in ts))
            return ",".join(kinds) if kinds else "float"
        return f"{side(self.inputs)}->{side(self.outputs)}"

    def to_json(self, unit: "Unit | str" = Unit.SAME_WORK) -> dict[str, Any]:
        """``conversion``: ``none`` (the file takes the reference's float tensors), ``timed`` (inside the timed call:
        the same-work unit) or ``outside the timed call`` (the file-alone unit)."""
        where = "none" if not self.converts else ("timed" if Unit(unit) is Unit.SAME_WORK else "outside the timed call")
        def one(t: TensorInterface) -> dict[str, str]:
            return {"dtype": t.dtype, "layout": t.layout, "conversion": t.conversion or None}
        outputs = self.outputs or (TensorInterface("float"),)
        return {"inputs": [one(t) for t in self.inputs], "outputs": [one(t) for t in outputs], "conversion": where,
                "text": self.text()}


def float_interface(specs: Sequence[InputSpec] | None, declared: bool = False) -> Interface:
    """The interface of a file that takes the reference's float tensors; ``declared``: the specs are the file's
    own, so a channels-last input is a conversion ``prepare`` makes (a copy into channels-last memory)."""
    def one(s: InputSpec) -> TensorInterface:
        if len(s.shape) != 4:
            return TensorInterface(s.dtype)
        if declared and s.memory_format == MemoryFormat.CHANNELS_LAST:
            return TensorInterface(s.dtype, "NHWC", "NCHW->NHWC (channels-last memory)")
        return TensorInterface(s.dtype, "NCHW")

    return Interface(tuple(one(s) for s in specs or ()))


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A runtime with no options of its own."""


class Session(abc.ABC):
    name: ClassVar[str]
    formats: ClassVar[tuple[Format, ...]]
    """Formats this runtime can load; the first runtime listing a format is its default."""
    packages: ClassVar[tuple[str, ...]] = ()
    """Importable packages this runtime needs (checked before loading)."""
    Options: ClassVar[type] = NoOptions
    """This runtime's own options (a frozen dataclass); ``RuntimeOptions.extra`` is checked against it."""
    needs_torch: ClassVar[bool] = True
    """False for runtimes that load and run their file without importing torch, fed numpy arrays
    (:func:`as_array`): compare times them in a lean worker that loads only the runtime."""
    measures_latency: ClassVar[bool] = True
    """False for runtimes that check numbers on this host but do not run the real thing (e.g. a host
    interpreter for an Android-only format): bench refuses them and compare shows "on device only"."""

    def __init__(self, target: Any, options: RuntimeOptions, own: Any = None):
        self.target = target
        self.options = options
        self.own = own if own is not None else self.Options()
        """This runtime's own options (an instance of ``Options``)."""
        self.notes: list[str] = []
        self.threads: int | None = None
        self._validated = False

    # -- construction -----------------------------------------------------------------
    @classmethod
    def check_available(cls) -> None:
        require(cls.packages, f"runtime '{cls.name}'")

    @classmethod
    def import_backend(cls) -> None:
        """Import the backend's modules, so load time measures loading the model, not Python imports."""
        for pkg in cls.packages:
            importlib.import_module(pkg)

    @classmethod
    def load(cls, target: Any, options: RuntimeOptions = RuntimeOptions()) -> "Session":
        cls.check_available()
        fmt = getattr(target, "format", None)
        if fmt not in cls.formats:
            raise ConfigError(
                f"runtime '{cls.name}' cannot run format '{fmt}'",
                hint=f"it runs: {', '.join(map(str, cls.formats))}",
            )
        own = check_options(cls.name, options)
        session = cls(target, options, own)
        session._load()
        session._loaded()
        if options.threads is not None:
            session.set_threads(options.threads)
        return session

    @abc.abstractmethod
    def _load(self) -> None: ...

    def _loaded(self) -> None:
        """After ``_load``, before any call: what a runtime keeps of the file as loaded."""

    # -- state a module keeps between calls (mobilize.runtimes.held_state) -----------------
    def held_state(self, inputs: Sequence[Any]) -> Any:
        """A :class:`~mobilize.runtimes.held_state.HeldState` when the file's answers depend on the calls made
        before (state kept inside the module); None for a runtime whose files keep none (their state, if any, is
        an input and an output)."""
        return None

    def reset_state(self) -> None:
        """Start a new stream: the module's reset method, else the state the file was loaded with."""

    # -- running ------------------------------------------------------------------------
    @abc.abstractmethod
    def prepare(self, inputs: Sequence[Any]) -> Any:
        """Convert torch tensors to this runtime's native inputs, once, outside the timed loop."""

    @abc.abstractmethod
    def run_prepared(self, native: Any) -> Any:
        """Run once on prepared inputs; the benchmark times exactly this call."""

    def outputs_to_torch(self, raw: Any) -> list:
        return flatten_outputs(raw)

    # -- the same work for every file --------------------------------------------------------
    def interface(self) -> Interface:
        """The file's inputs and outputs as it takes and gives them; a runtime whose file takes another element
        type or layout than the reference's float tensors says so, with the conversion ``prepare`` does."""
        declared = self.declared_input_specs()
        return float_interface(declared or getattr(self.target, "input_specs", None), declared=bool(declared))

    def run_float(self, inputs: Sequence[Any]) -> Any:
        """From the reference's float inputs to float answers, this file's own conversions inside the call (the
        ``same-work`` unit); returns what ``run_prepared`` returns, floats (``outputs_to_torch`` takes it too)."""
        return self.float_outputs(self.run_prepared(self.prepare(inputs)))

    def float_outputs(self, raw: Any) -> Any:
        """The float answers of ``run_prepared``'s outputs (dequantized), without torch; as they are by default."""
        return raw

    def run(self, inputs: Sequence[Any]) -> list:
        native = self.prepare(inputs)
        if not self._validated:
            return self.outputs_to_torch(self.checked_run(native, inputs))
        return self.outputs_to_torch(self.run_prepared(native))

    def checked_run(self, native: Any, inputs: Sequence[Any]) -> Any:
        """The first run: a failure here is reported against the inputs that caused it."""
        self.validate_inputs(inputs)

        def failed(exc: Exception) -> UserError:
            shapes = "; ".join(describe_tensor(t) for t in inputs) or "no inputs"
            if model_raised(exc):  # the model's own raise: its message, and no blame on the inputs' shapes
                return UserError(f"the model's own code raised on inputs [{shapes}]: {first_error_line(exc)}",
                                 hint="see the model's forward where it raises this", stage="run")
            return UserError(f"the model failed on inputs [{shapes}]: {first_error_line(exc)}"
                             f"{self._type_mismatch(inputs)}",
                             hint="check --input_dims / --input_type against what the model expects", stage="run")

        with translate_errors(failed, f"runtime '{self.name}'", ours=(inspect.getfile(type(self)),)):
            out = self.run_prepared(native)
        self._validated = True
        return out

    def validate_inputs(self, inputs: Sequence[Any]) -> None:
        """Compare inputs with what the model declares (static shapes), before running."""
        declared = self.declared_input_specs()
        if declared is None:
            return
        if len(declared) != len(inputs):
            raise UserError(
                f"the model takes {len(declared)} input(s) but {len(inputs)} were given",
                hint=f"the model expects: {'; '.join(str(s) for s in declared)}",
            )
        for i, (spec, tensor) in enumerate(zip(declared, inputs)):
            shape = tuple(tensor.shape)
            if len(spec.shape) != len(shape) or any(d > 0 and d != s for d, s in zip(spec.shape, shape)):
                raise UserError(
                    f"input {i} has shape {shape_text(shape)} but the model expects {shape_text(spec.shape)}",
                    hint="give --input_dims as the model declares its inputs, or leave it out to use the file's own",
                )

    def _type_mismatch(self, inputs: Sequence[Any]) -> str:
        """After a failed run: which input's element type differs from what the file declares (a runtime such
        as ExecuTorch says only "error 0x12" and logs the reason, which the terminal does not show)."""
        for i, (spec, tensor) in enumerate(zip(self.declared_input_specs() or (), inputs)):
            given = input_type_name(str(getattr(tensor, "dtype", spec.dtype)))
            if given != spec.dtype:
                return f" (input {i} is {given} but the file declares {spec.dtype})"
        return ""

    def declared_input_specs(self) -> list[InputSpec] | None:
        """Input specs the artifact itself declares (shape dims < 0 are dynamic), if any."""
        return None

    def declared_input_names(self) -> list[str]:
        """The names the artifact gives its inputs, in order (to match an .npz's arrays by name), if any."""
        return []

    def unbound_arguments(self) -> list[str]:
        """Inputs that are not tensors (``sr: int``), which no ``--input NAME=VALUE`` gave and nothing defaults;
        a random value for them would be meaningless."""
        return []

    def example_inputs(self, seed: int = 0) -> list:
        specs = self.declared_input_specs() or getattr(self.target, "input_specs", None)
        if not specs or any(d < 0 for s in specs for d in s.shape):  # 0: an empty input (a state), known
            raise ConfigError(
                f"cannot tell the input shape of {describe_target(self.target)}",
                hint='give --input_dims, e.g. --input_dims "1,3,224,224"',
            )
        return make_random_inputs(specs, seed)

    def bundled_inputs(self) -> list[list]:
        raise ConfigError(f"{describe_target(self.target)} has no bundled inputs",
                          hint="export with bundled inputs, or drop --use_bundled_input")

    @abc.abstractmethod
    def set_threads(self, threads: int) -> None: ...

    def details(self) -> dict[str, Any]:
        """Runtime-specific facts for the report (e.g. ONNX Runtime's nodes per execution provider)."""
        return {}

    def close(self) -> None:
        pass

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def timed_call(session: Session, inputs: Sequence[Any], unit: Unit | str = Unit.SAME_WORK, prepared: Any = None
               ) -> tuple[Callable[[Any], Any], Any]:
    """The call a benchmark times for ``unit``, and its argument.  A file that converts nothing (or the ``file``
    unit): ``run_prepared`` on inputs prepared once (``prepared`` when given); else ``run_float`` on the
    reference's float inputs."""
    if Unit(unit) is Unit.FILE or not session.interface().converts:
        return session.run_prepared, session.prepare(inputs) if prepared is None else prepared
    return session.run_float, list(inputs)


def flatten_outputs(raw: Any) -> list:
    import numpy as np
    import torch

    if isinstance(raw, torch.Tensor):
        return [raw]
    if isinstance(raw, np.ndarray):
        return [torch.from_numpy(raw)]
    if isinstance(raw, dict):
        raw = list(raw.values())
    if isinstance(raw, (list, tuple)):
        out = []
        for item in raw:
            out.extend(flatten_outputs(item))
        return out
    if raw is None:
        return []
    return [torch.as_tensor(raw)]


def as_array(t: Any) -> Any:
    """A contiguous numpy array of a torch tensor or of anything numpy takes (without importing torch)."""
    import numpy as np

    if hasattr(t, "detach"):
        t = t.detach().contiguous().numpy()
    array = np.asarray(t)  # not np.ascontiguousarray alone: it turns a 0-d (scalar) input into shape (1,)
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def output_names(raw: Any, prefix: str = "") -> list[str]:
    """Names for the tensors ``flatten_outputs`` yields, in the same order: dict keys (dotted when nested),
    positions for tuples and lists (``output0``, ``output1``), ``output`` for a single tensor."""
    if isinstance(raw, dict):
        out: list[str] = []
        for key, value in raw.items():
            out.extend(output_names(value, f"{prefix}{key}."))
        return out
    if isinstance(raw, (list, tuple)):
        out = []
        for i, item in enumerate(raw):
            out.extend(output_names(item, f"{prefix}{i}." if prefix else f"output{i}."))
        return out
    if raw is None:
        return []
    return [prefix[:-1] if prefix else "output"]


_RAISED = re.compile(r"^(?:builtins\.|torch\.)?[A-Za-z_.]*(?:Error|Exception): ")


def first_error_line(exc: BaseException) -> str:
    """The informative line of an exception message: TorchScript puts the innermost raise's message last, after
    its stacks (``builtins.RuntimeError: boom``)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    for ln in reversed(lines):
        if _RAISED.match(ln):
            return ln.split(": ", 1)[1].strip()
    return lines[0]


def model_raised(exc: BaseException) -> bool:
    """A TorchScript program's own ``raise`` (``prim::RaiseException``), not an operator failing on its inputs."""
    return "prim.RaiseException" in str(exc) or "prim::RaiseException" in str(exc)


def describe_tensor(t: Any) -> str:
    dtype = str(getattr(t, "dtype", "?")).replace("torch.", "")
    return f"{shape_text(tuple(t.shape))} {dtype}"


def describe_target(target: Any) -> str:
    path = getattr(target, "path", None)
    return str(path) if path is not None else getattr(target, "reference", repr(target))


def runtime_for(fmt: Format) -> type[Session]:
    """The default runtime for a format."""
    from mobilize.backends import default_runtime
    from mobilize.runtimes import RUNTIMES

    name = default_runtime(fmt)
    if name is None:
        from mobilize.core.backend import all_backends

        if any(b.decoders and str(fmt) in b.suffixes.values() for b in all_backends()):  # GGUF: a whole decoder
            raise ConfigError(f"a {fmt} file holds a generative decoder, not a tensor program: it is timed in tokens",
                              hint="time it with mobilize bench FILE --task generation; compare MODEL --task "
                                   "generation builds one from the transformers model")
        raise ConfigError(f"no runtime runs format '{fmt}'")
    return RUNTIMES.get(name)


def session_class(target: Any, runtime: str | None = None) -> type[Session]:
    from mobilize.runtimes import RUNTIMES

    return RUNTIMES.get(runtime) if runtime else runtime_for(target.format)


def open_session(target: Any, runtime: str | None = None, threads: int | None = None,
                 options: RuntimeOptions | None = None) -> Session:
    options = options or RuntimeOptions()
    if threads is not None:
        options = dataclasses.replace(options, threads=threads)
    return session_class(target, runtime).load(target, options)
