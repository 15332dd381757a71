"""What a search found: every candidate, the winner, the drift tables and diagnoses (``tune-report.json``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from mobilize.tune.candidates import Candidate


@dataclasses.dataclass
class TuneResult:
    candidates: list[Candidate]
    winner: Candidate | None
    reference_top1: float | None
    tie_with: list[str]
    """Candidates whose speed the winner's does not beat significantly (paired rounds, 95%)."""
    layers: dict[str, list[Any]]
    """Per-layer drift tables (candidate name -> ranked :class:`~mobilize.backends.onnxruntime.drift.LayerError`, or
    :class:`~mobilize.backends.executorch.drift.LayerError` for ExecuTorch)."""
    interrupted: bool
    search_s: float
    files: list[Path] = dataclasses.field(default_factory=list)
    diagnoses: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """"Why is int8 not faster" for int8 candidates no faster than their fp32 twin."""
    profiles: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Time-weighted per-op profiles (candidate name -> :class:`~mobilize.profile.TimeProfile` JSON)."""
    cut_short: list[str] = dataclasses.field(default_factory=list)
    """What the time budget left out (each line says how much time was left and what was not done)."""
    task: dict[str, Any] | None = None
    """The model's task, given with --task or guessed (mobilize.accuracy.tasks.TaskChoice's JSON)."""
    threads: dict[str, Any] | None = None
    """The winner at 1..cores threads and the best count (:func:`mobilize.tune.timing.best_threads`)."""
    choices: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Where mobilize departed from a stock default for the target CPU, with the default measured beside it."""

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "winner": self.winner.name if self.winner else None, "tie_with": self.tie_with,
                "interrupted": self.interrupted,
                "search_s": round(self.search_s, 2), "candidates": [c.to_json() for c in self.candidates],
                "layers": {k: [l.to_json() for l in v] for k, v in self.layers.items()},
                "diagnoses": self.diagnoses, "profiles": self.profiles, "cut_short": self.cut_short,
                "threads": self.threads, "choices": self.choices,
                "files": [str(p) for p in self.files]} | (
            {} if (self.task or {}).get("name") not in (None, "classification") and self.reference_top1 is None
            else {"reference_top1": self.reference_top1})


def format_layers(layers: Sequence[Any], top: int = 10) -> list[str]:
    """The ranked per-layer table of any route (ONNX tensors, ExecuTorch modules), by the drift module that made it."""
    import sys

    from mobilize.accuracy.drift import cause_lines

    if not layers:
        return []
    return sys.modules[type(layers[0]).__module__].format_table(layers, top) + cause_lines(layers)
