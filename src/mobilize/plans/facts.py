"""What the orchestrators learn about a model and its data before any work: format, input specs and names,
the default data and calibration sources, and whether the data fits the inputs.

    >>> default_data("zoo:digits_mobilenet_v2", [InputSpec((1, 1, 96, 96))]), calibration_for("digits:test")
    ('digits:test', ('digits:train', None))
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from mobilize.core.errors import ConfigError
from mobilize.core.inputs import InputSpec
from mobilize.sources.models import resolve_model
from mobilize.sources.reference import ModelRef


def default_data(reference: str, specs: Sequence[InputSpec]) -> str | None:
    """Labelled digits for the digits model, the sample photos for other image models, else None."""
    if "digits" in reference:
        return "digits:test"
    if specs and len(specs[0].shape) == 4 and specs[0].shape[1] in (1, 3):
        return "sample-photos"
    return None


def calibration_for(data: str | None) -> tuple[str | None, str | None]:
    """Calibration source for an accuracy source, and a note when they overlap."""
    if data is None:
        return None, None
    if data.startswith("digits"):
        return "digits:train", None
    return data, f"calibration and accuracy both use {data}: give held-out data for an unbiased accuracy figure"


def model_facts(reference: str | ModelRef, trust_pickle: bool, spec_count: int,
                progress: Callable[[int, int, str], None] | None = None,
                bound_args: dict[str, Any] | None = None) -> dict[str, Any]:
    """What compare needs to know before its workers start: the format, the declared input specs and the
    forward's input names (for ``spec_count`` inputs, or as many as it declares)."""
    if progress:
        progress(0, 1, "build the model")
    from mobilize.plans.fit import layer_counts

    source = resolve_model(reference, trust_pickle=trust_pickle, bound_args=bound_args)
    specs = list(getattr(source, "input_specs", None) or [])
    module = getattr(source, "module", None)
    names = input_names(module, spec_count or len(specs)) if module is not None else []
    if module is None:  # a file made elsewhere: what its default runtime reads from it
        from mobilize.runtimes.base import open_session

        with open_session(source, threads=1) as session:
            specs = specs or list(session.declared_input_specs() or [])
            names = session.declared_input_names()
            _check_bound(source, session.unbound_arguments(), specs, names)
    layers = layer_counts(module) if module is not None else {}
    return {"format": str(source.format), "input_specs": specs, "input_names": names, "layers": layers}


def _check_bound(source: Any, unbound: list[str], specs: Sequence[InputSpec], names: Sequence[str]) -> None:
    """Refuse a file whose non-tensor argument (``sr: int``) or integer input of rank 0 nothing gave a value: a
    random one takes an arbitrary branch of the model."""
    scalars = [f"{n}: a 0-d {s.dtype} input" for n, s in zip(names, specs)
               if not s.shape and not s.torch_dtype.is_floating_point]
    missing = list(unbound) + scalars
    if missing:
        first = missing[0].split(":")[0]
        raise ConfigError(f"{source.path} takes {'; '.join(missing)}, which no --input gave a value: a random one "
                          f"would be meaningless", hint=f"give it, e.g. --input {first}=16000")


def model_facts_isolated(reference: str | ModelRef, trust_pickle: bool, spec_count: int, timeout_s: float,
                         bound_args: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`model_facts` in a child process under the stage timeout: building a user's model runs its code
    (import, constructor, unpickling), which may hang or crash.  The zoo's models are mobilize's own."""
    from mobilize.pipeline.isolate import run_isolated
    from mobilize.sources.models import check_reference

    from mobilize.sources.reference import RefKind

    reference = check_reference(reference)  # parsed once: the child gets the typed reference
    if reference.kind == RefKind.ZOO:
        return model_facts(reference, trust_pickle, spec_count, bound_args=bound_args)
    return run_isolated(model_facts, reference, trust_pickle, spec_count, what="model check", timeout_s=timeout_s,
                        bound_args=bound_args)


def input_names(module: Any, count: int) -> list[str]:
    """The names of a module's first ``count`` forward parameters (to match .npz arrays by name)."""
    from mobilize.sources.bound import tensor_input_names

    return tensor_input_names(module, count)


def check_data_fits(specs: Sequence[InputSpec], data: str, names: Sequence[str] = ()) -> None:
    """Before any work: the data source gives inputs shaped for the model (the model itself first runs
    in the isolated reference stage, under the timeout)."""
    from mobilize.sources.data import open_data

    source = open_data(data)
    if source.inputs_per_sample != len(specs):
        raise ConfigError(f"data source '{data}' feeds {source.inputs_per_sample} input(s), but the model takes "
                          f"{len(specs)}", hint="give an .npz with one array per model input (named after the "
                                                "inputs, or x0, x1, ...)")
    source.sample_lists(list(specs), 1, list(names) or None)  # shaped as the model declares them
