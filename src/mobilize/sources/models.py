"""One resolver for every model reference a command accepts.

``zoo:NAME``, ``path/file.py:Name``, ``package.module:Name`` (a class or a factory returning an
``nn.Module``) resolve to a :class:`ModelSource`; model files (``.pt``, ``.ptl``, ``.pt2``,
``.onnx``, ``.pte``) resolve to an :class:`~mobilize.core.artifact.Artifact`.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
import zipfile
from pathlib import Path
from typing import Any

from mobilize.core.artifact import Artifact
from mobilize.backends import backend_for_format
from mobilize.core.errors import ConfigError, UnsupportedModelError, UserError, headline, translate_errors
from mobilize.core.inputs import InputSpec
from mobilize.sources.reference import ModelRef, RefKind
from mobilize.core.text import a


@dataclasses.dataclass
class ModelSource:
    """An eager ``nn.Module`` (in eval mode) and what is known about its inputs."""

    module: Any
    reference: str
    input_specs: list[InputSpec] = dataclasses.field(default_factory=list)
    num_classes: int | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    format = "eager"

    @property
    def name(self) -> str:
        return self.reference.split(":")[-1]


def module_size_bytes(module: Any) -> int:
    """The size of an eager model: its state_dict serialized as ``torch.save`` writes it (packed int8
    weights included, which ``parameters()`` does not list).  The one eager-size figure bench and compare report."""
    import io

    import torch

    class _Counter(io.RawIOBase):
        size = 0

        def writable(self) -> bool:
            return True

        def write(self, b) -> int:
            self.size += len(b)
            return len(b)

    counter = _Counter()
    torch.save(module.state_dict(), counter)
    return counter.size


def resolve_model(reference: str | ModelRef, *, trust_pickle: bool = False,
                  bound_args: dict[str, Any] | None = None) -> ModelSource | Artifact:
    """Build the model a reference names (a string is parsed here; a :class:`ModelRef` is used as it is).
    ``bound_args``: non-tensor forward arguments (``--input sr=16000``) bound to the module by name."""
    ref = ModelRef.parse(reference)
    reference = ref.text
    if ref.kind == RefKind.ZOO:
        source = _resolve_zoo(ref.attribute, reference)
    elif ref.kind == RefKind.PYTHON_FILE:
        source = _instantiate(getattr(import_python_file(ref), ref.attribute), reference)
    elif ref.kind == RefKind.FILE:
        source = _resolve_file(Path(ref.path), trust_pickle)
    elif ref.kind == RefKind.MODEL_FOLDER:
        source = _resolve_model_folder(Path(ref.path), reference)
    else:
        source = _resolve_import(ref.module, ref.attribute, reference)
    if bound_args and not isinstance(source, ModelSource):
        return _bind_file(source, dict(bound_args), reference)
    if bound_args:
        from mobilize.sources.bound import bind_arguments

        source.module = bind_arguments(source.module, bound_args, reference)
        typed = getattr(source.module, "bound_args", bound_args)  # as the forward receives them (sr=16000, an int)
        source.notes.append("bound forward argument(s): " + ", ".join(f"{k}={v!r}" for k, v in typed.items()))
    return source


def _bind_file(art: Artifact, bound_args: dict[str, Any], reference: str) -> Artifact:
    """A file made elsewhere with ``--input NAME=VALUE`` bound, as its engine binds it (``Backend.tools``
    ``bind_inputs``: a TorchScript forward's ``int``/``float`` argument, an ONNX input of rank 0); what was bound is
    recorded on the artifact and said in a note."""
    engine = backend_for_format(art.format)
    bind = engine.entry("tools", "bind_inputs") if engine is not None else None
    if bind is None:
        raise ConfigError(f"--input {next(iter(bound_args))}=... binds a non-tensor input; {reference} is "
                          f"{a(str(art.format))} file, whose inputs mobilize cannot bind",
                          hint="feed every input as a tensor (--input_dims, --data)")
    bound = bind(art, bound_args)
    bound.notes.append("bound input(s): " + ", ".join(f"{k}={v!r}" for k, v in bound.bound_args.items()))
    return bound


def check_reference(reference: str | ModelRef) -> ModelRef:
    """The checks resolve_model starts with, without running any of the model's code (no import, no
    constructor, no unpickling): a misspelt zoo name or a missing or cut-short file fails here, cheaply.
    Returns the parsed reference, for the caller to pass on."""
    ref = ModelRef.parse(reference)
    if ref.kind == RefKind.ZOO:
        from mobilize.zoo import ZOO

        if ref.attribute not in ZOO.names():  # a built-in entry is built where it is used (importing it imports torch)
            ZOO.get(ref.attribute)  # raises: unknown, with the nearest names
    elif ref.kind == RefKind.PYTHON_FILE and not Path(ref.path).exists():
        raise UserError(f"model file not found: {ref.path}")
    elif ref.kind == RefKind.FILE:
        from mobilize.core.completeness import check_complete

        art = Artifact.from_file(ref.path)
        check_complete(art.path, art.format)
    return ref


def _resolve_zoo(name: str, reference: str) -> ModelSource:
    from mobilize.zoo import ZOO

    entry = ZOO.get(name)
    module = entry.build()
    return ModelSource(module.eval(), reference, list(entry.input_specs), entry.num_classes)


def _instantiate(obj: Any, reference: str) -> ModelSource:
    import torch

    if obj is None:
        raise ConfigError(f"'{reference}' names nothing")
    hint = "the class (or factory) must build the model with no arguments"
    with translate_errors(UnsupportedModelError, f"building '{reference}'", hint=hint,  # the model's constructor
                          message=lambda exc: f"building '{reference}' failed: {_failure(exc)}"):
        try:
            module = obj() if callable(obj) and not isinstance(obj, torch.nn.Module) else obj
        except TypeError as exc:
            raise UnsupportedModelError(
                f"could not build '{reference}' with no arguments: {exc}",
                hint="point at a factory function that takes no arguments and returns the model",
            ) from exc
        except SystemExit as exc:
            raise UnsupportedModelError(f"building '{reference}' failed: {_failure(exc)}", hint=hint) from exc
    if not isinstance(module, torch.nn.Module):
        raise UnsupportedModelError(f"'{reference}' gave a {type(module).__name__}, not a torch.nn.Module")
    specs = getattr(module, "input_specs", None) or getattr(obj, "input_specs", None) or []
    specs = [s if isinstance(s, InputSpec) else InputSpec(tuple(s)) for s in specs]
    return ModelSource(module.eval(), reference, specs)


def import_python_file(ref: ModelRef) -> Any:
    """The user's Python file as a module, imported once per process under a name every process shares
    (:attr:`ModelRef.module_name`): a module pickled by one worker unpickles in the shared timing host."""
    path = Path(ref.path)
    if not path.exists():
        raise UserError(f"model file not found: {path}")
    name = ref.module_name
    if name in sys.modules:
        module = sys.modules[name]
    else:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:  # an error, or sys.exit(), while the file runs its top level
            with translate_errors(UnsupportedModelError, f"importing {path}",
                                  message=lambda exc: f"importing {path} failed: {_failure(exc)}"):
                try:
                    spec.loader.exec_module(module)
                except SystemExit as exc:
                    raise UnsupportedModelError(f"importing {path} failed: {_failure(exc)}", hint=_IMPORT_HINT) from exc
        except BaseException:
            sys.modules.pop(name, None)
            raise
    if not hasattr(module, ref.attribute):
        raise ConfigError(f"{path} has no '{ref.attribute}'", hint=_public_names(module))
    return module


def _resolve_model_folder(path: Path, reference: str) -> ModelSource:
    """A saved transformers causal LM as a one-tensor module (token ids in, logits out); ``.lm`` is the model."""
    import torch

    from mobilize.lowering.causal_lm import load_causal_lm

    lm = load_causal_lm(path)  # the generation task's one load: not a causal LM, a head missing - one line each

    class CausalLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids):
            return self.lm(input_ids=input_ids, use_cache=False).logits

    length = min(int(getattr(lm.config, "max_position_embeddings", 128) or 128), 128)
    return ModelSource(CausalLM().eval(), reference, [InputSpec((1, length), "int64")])


def _resolve_import(module_name: str, attr: str, reference: str) -> ModelSource:
    with translate_errors(UnsupportedModelError, f"importing '{module_name}'",
                          message=lambda exc: f"importing '{module_name}' failed: {_failure(exc)}"):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"cannot import '{module_name}' from '{reference}': {exc}") from exc
        except SystemExit as exc:
            raise UnsupportedModelError(f"importing '{module_name}' failed: {_failure(exc)}",
                                        hint=_IMPORT_HINT) from exc
    if not hasattr(module, attr):
        raise ConfigError(f"module '{module_name}' has no '{attr}'", hint=_public_names(module))
    return _instantiate(getattr(module, attr), reference)


_IMPORT_HINT = "a model file must not exit when imported: put script code under if __name__ == '__main__':"


def _failure(exc: BaseException) -> str:
    """One line for an exception raised by the user's code (sys.exit() included)."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {headline(exc)}"


def _public_names(module: Any) -> str:
    names = [n for n in vars(module) if not n.startswith("_")][:12]
    return f"it defines: {', '.join(names)}" if names else "it defines nothing public"


def torch_zip_kind(path: Path) -> str:
    """'torchscript', 'pickle' (a ``torch.save`` file) or 'invalid' for a ``.pt`` file."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError):
        return "invalid"
    if any("/code/" in n or n.startswith("code/") for n in names) and any(n.endswith("constants.pkl") for n in names):
        return "torchscript"
    if any(n.endswith("data.pkl") for n in names):
        return "pickle"
    return "invalid"


def _resolve_file(path: Path, trust_pickle: bool) -> ModelSource | Artifact:
    from mobilize.core.completeness import check_complete

    art = Artifact.from_file(path)
    check_complete(path, art.format)  # every file a user hands over is whole before anything reads it
    engine = backend_for_format(art.format)
    if engine is not None and art.format in engine.torch_archives:  # may hold a pickled module, not a program
        kind = torch_zip_kind(path)
        if kind == "invalid":
            raise UnsupportedModelError(f"{path} is not a valid TorchScript file (not a PyTorch zip archive)")
        if kind == "pickle":
            return _load_pickled_module(path, trust_pickle)
    return art


def _load_pickled_module(path: Path, trust_pickle: bool) -> ModelSource:
    import torch

    if not trust_pickle:
        raise UserError(
            f"{path} is a pickled Python object (torch.save), not TorchScript; unpickling can run "
            "arbitrary code, so mobilize will not load it",
            hint="pass --trust-pickle if you trust this file, or reference the model class as file.py:Class",
        )
    with translate_errors(UnsupportedModelError, f"could not unpickle {path}",
                          message=lambda exc: f"could not unpickle {path}: {exc}"):
        obj = torch.load(path, map_location="cpu", weights_only=False)
    if isinstance(obj, dict):
        raise UnsupportedModelError(
            f"{path} holds a state_dict (weights only), not a model",
            hint="reference the model class as file.py:Class and load the weights in its constructor",
        )
    return _instantiate(obj, str(path))
