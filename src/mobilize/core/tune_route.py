"""How ``mobilize tune`` searches one engine: the typed capability each engine declares in its folder
(``backends/<engine>/tune_route.py``, registered as ``Backend.tune``), so tune asks the route, never the engine's
name.  A new engine that declares a route is searched with no edit in ``tune/``.

    >>> route = TuneRoute("demo", starts=(Start("demo-fp32", recipe="demo-fp32"),
    ...                                   Start("demo-int8", recipe="demo-int8", prune=False)), fp32_twin="demo-fp32")
    >>> [s.name for s in route.int8_starts()], route.exclusion
    (['demo-int8'], <Exclusion.NONE: ''>)
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping


class Exclusion(enum.StrEnum):
    """How tune keeps the layers that cost an int8 candidate its accuracy in float, one more at a time."""

    NONE = ""
    """The engine has no per-layer drift localiser: an int8 candidate over budget stays lost."""
    NODES = "nodes"
    """Localise the int8 file's drift against its fp32 twin's file, then keep the worst nodes in float (the
    export step's ``exclude_nodes``)."""
    MODULES = "modules"
    """Localise the drift on the model's quantized graph, then keep the worst layers' modules in float (the
    export step's ``exclude``)."""


@dataclasses.dataclass(frozen=True)
class Start:
    """One starting candidate of a route: a built-in recipe, or a one-step export made for tune."""

    name: str
    """The candidate's name (``onnx-int8-minmax``), unique over every route."""
    recipe: str = ""
    """A built-in recipe's name (``executorch-int8``); empty: the one-step recipe ``export`` with ``options``."""
    export: str = ""
    """The exporter key of the one-step recipe (used when ``recipe`` is empty)."""
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The export step's options (none: the exporter's defaults)."""
    calibrated: bool = False
    """The options also take tune's ``calibration_samples``."""
    prune: bool = True
    """Each ``--prune`` level repeats this candidate on the pruned model."""


@dataclasses.dataclass(frozen=True)
class TuneRoute:
    """What tune needs to know about one engine's runtime to search it."""

    runtime: str
    """The runtime key ``--runtimes`` names (``onnxruntime``)."""
    starts: tuple[Start, ...]
    """The search's starting points for this runtime, the fp32 twin first."""
    fp32_twin: str
    """The start every int8 candidate of this route is compared with (and, with :attr:`int8_from_fp32_file`,
    quantized from)."""
    int8_from_fp32_file: bool = False
    """Int8 candidates quantize the fp32 twin's file built once after the same passes (same graph) instead of
    exporting the model again."""
    exclusion: Exclusion = Exclusion.NONE
    """How an int8 candidate over budget keeps its worst layers in float."""
    default: bool = False
    """Searched when the user names no runtimes (``tune`` without ``--runtimes``)."""
    stock_reduce_range: bool = False
    """Where the target makes mobilize turn ``reduce_range`` on for static int8, tune also measures the stock
    default (off) beside it."""

    def int8_starts(self) -> list[Start]:
        """The starts that are not the fp32 twin: where the greedy exclusion may begin."""
        return [s for s in self.starts if s.name != self.fp32_twin]
