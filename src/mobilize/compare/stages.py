"""Where a compare run's wall time goes: the float reference (and its lint), each export, each variant's
load + accuracy check (and ExecuTorch's time profile), starting the lean timing workers and loading variants into
the shared timing host, the timed rounds.

Exports run on a second thread beside the checks, so the per-variant parts add up to more than the total; the
phases' wall seconds (``wall``: the reference, the variants' builds and checks, the timed rounds, the rest) add up to
it (:func:`mobilize.report.terminal.stage_line` prints both).

    >>> clock = StageSeconds()
    >>> clock.worker("reference", "reference", {"start": 2.0, "reference": 5.0})
    >>> clock.worker("export", "onnx-fp32", {"start": 2.0, "export": 4.0})
    >>> clock.lint_s = 3.0
    >>> clock.to_json()["reference"], clock.to_json()["lint"], clock.to_json()["export"]
    (7.0, 3.0, {'onnx-fp32': 6.0})
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

PROFILE_STAGES = ("profile",)
"""Worker stages counted as lint/profile rather than as the stage they sit in."""


class StageSeconds:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.parts: dict[str, dict[str, dict[str, float]]] = {"reference": {}, "export": {}, "check": {}, "timer": {}}
        self.timed_rounds_s: float | None = None
        self.lint_s: float | None = None
        """The reference worker's lint of the model (beside the variants)."""
        self.total_s: float | None = None
        self.walls: dict[str, float] = {}
        """Wall seconds of the run's phases in order (reference, variants), timed by :meth:`phase`."""
        self._lock = threading.Lock()  # exports report from their own thread

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.walls[name] = time.monotonic() - t0

    def worker(self, part: str, name: str, seconds: dict[str, float]) -> None:
        """One worker's seconds per stage (its ``Worker.seconds``) under ``part`` / ``name``."""
        with self._lock:
            self.parts[part][name] = dict(seconds)

    def finish(self) -> None:
        self.total_s = time.monotonic() - self.started

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            parts = {k: dict(v) for k, v in self.parts.items()}
        ref = parts["reference"].get("reference", {})

        def total(stages: dict[str, float], leave_out: tuple[str, ...] = ()) -> float:
            return round(sum(s for k, s in stages.items() if k not in leave_out), 1)

        profile = {n: round(sum(st.get(k, 0.0) for k in PROFILE_STAGES), 1) for n, st in parts["check"].items()}
        walls = {k: round(s, 1) for k, s in self.walls.items()}
        if self.timed_rounds_s is not None:
            walls["timed_rounds"] = round(self.timed_rounds_s, 1)
        if self.total_s is not None and walls:
            walls["rest"] = round(max(0.0, self.total_s - sum(walls.values())), 1)
        return {
            "wall": walls,
            "total": None if self.total_s is None else round(self.total_s, 1),
            "reference": total(ref, ("lint",)),
            "lint": None if self.lint_s is None else round(self.lint_s, 1),
            "export": {n: total(st) for n, st in parts["export"].items()},
            "load_accuracy": {n: total(st, PROFILE_STAGES) for n, st in parts["check"].items()},
            "profile": {n: s for n, s in profile.items() if s},
            "timer_start": {n: total(st) for n, st in parts["timer"].items()},
            "timed_rounds": None if self.timed_rounds_s is None else round(self.timed_rounds_s, 1),
            "workers": {part: {n: {k: round(s, 1) for k, s in st.items()} for n, st in by.items()}
                        for part, by in parts.items()},
        }
