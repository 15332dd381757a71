"""The ``generation`` plan: every engine's decoder variants (``Backend.decoders``), in a stable order, the
float eager file first (the speed-up reference), as a plan compare's one run (:class:`mobilize.compare.plan_run.
PlanRun`) runs like any other: :func:`decoder_plan`.  ``NAME@gN`` names a variant built with int4 group N, one of the
groups its tool offers (tune's ladder; ``optimize --recipe onnx-int4@g64`` rebuilds one).

    >>> names = [v.name for v in generation_variants()]
    >>> names[0], "executorch-8da4w" in names, "onnx-int4" in names
    ('eager-fp32', True, True)
    >>> [(v.name, v.group) for v in generation_variants(["onnx-int4@g64"])]
    [('onnx-int4@g64', 64)]
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from mobilize.core.backend import entries
from mobilize.core.decoder import DecoderVariant
from mobilize.core.errors import ConfigError, InternalError
from mobilize.core.registry import did_you_mean

REFERENCE = "eager-fp32"
"""The variant speed-ups are measured against."""
LARGE_PARAMETERS = 200_000_000
"""From this many parameters (a saved folder's, read from its safetensors headers) compare's default generation plan
is :data:`LARGE_PLAN`; ``--plan generation`` builds every file."""
LARGE_PLAN = ("eager-fp32", "executorch-8da4w", "onnx-genai-int4", "openvino-int4", "llamacpp-q4_k_m", "litert-int4")
"""The float reference and one int4 file per engine (each engine's fastest at Qwen2.5-0.5B's shape): with compare's
defaults the 0.5B shape took 21 min of 2 quiet Zen 4 cores with these six files (docs/results.md, run J; ExecuTorch's
and LiteRT's builds 816 s of it); every file of the plan would take past 40."""


def generation_variants(names: Sequence[str] = ()) -> list[DecoderVariant]:
    """The variants named (all when empty), each loaded from its engine's folder."""
    found = entries("decoders")
    order = sorted(found, key=lambda n: (n != REFERENCE, found[n][0].name, n))
    if not names:
        return [_registered(n, *found[n]) for n in order]
    chosen = []
    for name in dict.fromkeys(names):  # once each, in the plan's order below
        base, group = split_group(name)
        if base not in found:
            raise ConfigError(f"unknown decoder variant '{base}'", hint=did_you_mean(base, order))
        variant = _registered(base, *found[base])
        if group is not None:
            if group not in variant.groups:
                offered = ", ".join(str(g) for g in variant.groups) or "none (it has no int4 groups)"
                raise ConfigError(f"{base} offers no group {group}", hint=f"its groups: {offered}")
            variant = dataclasses.replace(variant, name=name, group=group)
        chosen.append(variant)
    return sorted(chosen, key=lambda v: (v.name != REFERENCE, v.engine, v.name))


def _registered(key: str, backend: Any, entry: str) -> DecoderVariant:
    """The variant a backend registers under ``key``, which must be its own name and name that backend as its engine:
    a listed name that ``--variant`` then refused, or a file labelled with another engine, was the alternative."""
    variant = backend.load(entry)
    if variant.name != key or variant.engine != backend.name:
        raise InternalError(f"backend '{backend.name}' registers decoder '{key}' as {entry}, whose variant is named "
                            f"'{variant.name}' with engine '{variant.engine}': the key, the name and the engine must "
                            f"agree")
    return variant


def split_group(name: str) -> tuple[str, int | None]:
    """``onnx-int4@g64`` -> (``onnx-int4``, 64); a plain name -> (name, None)."""
    m = re.fullmatch(r"(.+)@g(\d+)", name)
    return (m.group(1), int(m.group(2))) if m else (name, None)


def with_group(variant: DecoderVariant, group: int) -> DecoderVariant:
    """The variant built with int4 group ``group`` (named ``NAME@gN``)."""
    return dataclasses.replace(variant, name=f"{variant.name}@g{group}", group=group)


def unavailable(variant: DecoderVariant) -> str | None:
    """Why a variant cannot run here (a package missing, or the engine's own reason), else None."""
    from mobilize.core.packages import install_hint, missing

    absent = missing(variant.packages)
    if absent:
        return f"needs {', '.join(absent)} ({install_hint(absent)})"
    return variant.available()


@dataclasses.dataclass(frozen=True)
class DecoderStep:
    """One decoder variant as a plan's variant: built (``export``) by its engine's tool, then checked and timed."""

    variant: DecoderVariant
    export: bool = True

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def slow_build(self) -> bool:
        return self.variant.slow_build

    def to_dict(self) -> dict:
        return {"name": self.name, "engine": self.variant.engine, "decoder": True,
                "loads_transformers": self.variant.session_loads_transformers}


@dataclasses.dataclass(frozen=True)
class DecoderPlan:
    """The ``generation`` plan (or tune's ladder rungs): what :class:`~mobilize.compare.plan_run.PlanRun` reads of a
    plan - its name, its variants and the speed-up reference."""

    name: str
    variants: tuple[DecoderStep, ...]
    reference: str = REFERENCE


def default_names(parameters: int | None, plan: str) -> tuple[list[str], list[str]]:
    """The variants compare builds when none is named (an empty list: all), and the note saying why: a model of
    :data:`LARGE_PARAMETERS` or more, or ``--plan generation-large``, gets :data:`LARGE_PLAN` unless ``--plan
    generation`` asks for every file.

        >>> default_names(494_000_000, "default")[0][:2], default_names(4_000_000, "default"), default_names(494_000_000, "generation")
        (['eager-fp32', 'executorch-8da4w'], ([], []), ([], []))
        >>> default_names(4_000_000, "generation-large")[0] == list(LARGE_PLAN)
        True
    """
    asked = plan == "generation-large"
    if not asked and (plan == "generation" or not parameters or parameters < LARGE_PARAMETERS):
        return [], []
    total = len(generation_variants())
    model = "--plan generation-large" if asked else f"a {parameters / 1e6:.0f}M-parameter model"
    return list(LARGE_PLAN), [f"plan: {model}: the float reference and one int4 file per engine "
                              f"({', '.join(LARGE_PLAN)}); --plan generation builds all {total}, --variant NAME any one"]


def decoder_plan(names: Sequence[str] = (), name: str = "generation") -> tuple[DecoderPlan, list[str]]:
    """The plan of the variants named (all when empty) that can run here, and a note for each left out."""
    steps, notes = [], []
    for v in generation_variants(names):
        why = unavailable(v)
        if why:
            notes.append(f"plan: left out {v.name}: {why}")
        else:
            steps.append(DecoderStep(v))
    reference = REFERENCE if any(s.name == REFERENCE for s in steps) else (steps[0].name if steps else REFERENCE)
    return DecoderPlan(name, tuple(steps), reference), notes
