"""The checks a command runs before any work, shared by every command that takes a model and data:
the model reference (built in a child process for a user's code, so a crash in its constructor is
one line), its input shapes, and each data source (readable, not empty, labelled where the budget
needs labels, shaped for the model).  Output paths are checked by ``main`` from each command's
``outputs`` declaration; numbers by :mod:`mobilize.core.checks`.
"""

from __future__ import annotations

from typing import Any, Sequence

from mobilize.core.errors import ConfigError

MODEL_CHECK_TIMEOUT_S = 300.0
"""How long building a user's model may take in the check's child process."""


def check_model(reference: str, *, command: str, input_specs: Sequence[Any] = (), trust_pickle: bool = False,
                pytorch_only: bool = False, bound_args: dict[str, Any] | None = None,
                timeout_s: float | None = MODEL_CHECK_TIMEOUT_S) -> tuple[list[Any], list[str]]:
    """The model's input specs (``input_specs`` if given, else its own) and forward input names."""
    from mobilize.plans.facts import model_facts_isolated
    from mobilize.sources.models import ModelSource

    facts = model_facts_isolated(reference, trust_pickle, len(input_specs), timeout_s,
                                 bound_args=bound_args)
    if pytorch_only and facts["format"] != ModelSource.format:  # a file made elsewhere, not the model's code
        raise ConfigError(f"{command} takes a PyTorch model (zoo:, file.py:Class, pkg.mod:factory); {reference} is "
                          f"a {facts['format']} file", hint=f"{command} builds its files from the PyTorch model")
    specs = list(input_specs or facts["input_specs"])
    if not specs:
        raise ConfigError("the model's input shape is unknown", hint='give --input_dims, e.g. "1,3,224,224"')
    return specs, list(facts["input_names"])


def check_data(reference: str, flag: str, specs: Sequence[Any], names: Sequence[str] = (), *,
               labelled_for: str | None = None) -> None:
    """``reference`` opens, has samples, has labels when ``labelled_for`` (the option that needs them) is
    given, and feeds inputs shaped for ``specs``."""
    from mobilize.plans.facts import check_data_fits
    from mobilize.sources.data import open_data

    source = open_data(reference)
    if len(source) == 0:
        raise ConfigError(f"{flag} {reference} has no samples")
    if labelled_for and not source.labelled:
        raise ConfigError(f"{labelled_for} needs labelled samples, and {flag} {reference} has no labels",
                          hint="give labelled data (one subfolder per class, or 'y' in the .npz), or judge by "
                               "--min-cosine to the float model")
    check_data_fits(specs, reference, names)
