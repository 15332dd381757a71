"""The one bench report: what ``mobilize bench`` (Python, native, frames, arm64 emulated, a device log) says
about one model run, typed once; :meth:`BenchReport.to_json` is the JSON ``bench --json`` writes.

    >>> from mobilize.bench.stats import BenchStats
    >>> r = BenchReport(model="zoo:conv_bn_relu", format="eager", runtime="eager", threads=1, warmup=1, iterations=2,
    ...                 size_bytes=100, input_source="random-with-seed-0", input_specs=[],
    ...                 stats=BenchStats.from_times_ns([1e6, 3e6], 4e6), load_ms=1.0, first_run_ms=2.0, peak_rss_mb=50.0)
    >>> j = r.to_json()
    >>> j["latency_ms_p50"], j["iterations"], j["schema_version"] == SCHEMA_VERSION, "_outputs" in j
    (2.0, 2, True, False)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mobilize.report.json_report import SCHEMA_VERSION


@dataclasses.dataclass
class BenchReport:
    model: str
    format: str | None
    runtime: str
    threads: int | None
    warmup: int
    iterations: int
    size_bytes: int | None
    input_source: str
    input_specs: list[dict[str, Any]]
    notes: list[str] = dataclasses.field(default_factory=list)
    stats: Any = None
    """The timed loop's :class:`mobilize.bench.stats.BenchStats` (or its JSON, for a device log); None where the
    times are not latency (emulated)."""
    load_ms: float | None = None
    first_run_ms: float | None = None
    peak_rss_mb: float | None = None
    runner: str | None = None
    """``native`` for the C++ programs; None for the Python runtimes."""
    on: str | None = None
    """Where it ran when not here (``arm64`` under emulation)."""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The runtime's own facts (``session.details()``), merged at the top level as before."""
    sections: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Named sections after the figures: ``native``, ``frames``, ``arm64``, ``log``, ``speed_benchmark_torch``."""
    outputs: Any = None
    """The outputs of the last run, for the caller's checks; never written."""
    timed: bool = True
    """False where the run's times are not latency: the top-level timing keys are left out (the arm64 section
    carries them, labelled)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "model": self.model, "format": self.format,
                               "runtime": self.runtime}
        if self.runner:
            out["runner"] = self.runner
        if self.on:
            out["on"] = self.on
        out.update(threads=self.threads, warmup=self.warmup, iterations=self.iterations, size_bytes=self.size_bytes)
        if self.timed:
            stats = self.stats.to_json() if hasattr(self.stats, "to_json") else dict(self.stats or {})
            out.update(load_ms=self.load_ms, first_run_ms=self.first_run_ms)
            out.update({k: v for k, v in stats.items() if k != "iterations"})
            out["peak_rss_mb"] = self.peak_rss_mb
        out.update(input_source=self.input_source, input_specs=list(self.input_specs), notes=list(self.notes))
        out.update(self.details)
        out.update(self.sections)
        return out

    def to_result(self) -> dict[str, Any]:
        """The JSON plus ``_outputs`` (the last run's outputs) for the command's own checks."""
        return {**self.to_json(), "_outputs": self.outputs}
