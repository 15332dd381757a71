"""Measured per-layer time: ONNX Runtime's profiler on real samples, attributed to the profile's rows.

The model is exported to ONNX (once per lint run), opened with the default optimization level
(what ``mobilize bench`` runs), warmed up, then run ``time_runs`` times on real samples with
``SessionOptions.enable_profiling``.  Each profiled node's kernel time is traced back to the
module it came from (``mobilize.lint.onnx_map``) and added to that module's row; nodes ONNX
Runtime created itself (layout reorders) that cannot be traced back get their own row.
"""

from __future__ import annotations

import collections
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from mobilize.backends.onnxruntime.sessions import ort_session, session_options
from mobilize.backends.onnxruntime.onnx_map import OnnxScopes, export_onnx
from mobilize.lint.support import OPS_SUFFIX, LayerRow, Profile, ops_row

UNATTRIBUTED = "(onnxruntime-inserted)"
"""Row for kernel time of nodes ONNX Runtime added that trace back to no module (layout reorders)."""


def measure_time(profile: Profile, subject: Any, samples: list[list], data_reference: str) -> str:
    """Fill ``time_ms`` / ``time_share`` of the profile's rows; returns what the time was measured on."""
    import onnx
    import onnxruntime as ort

    cfg = subject.config
    proto = export_onnx(subject)
    scopes = OnnxScopes(proto)
    names = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
    feeds = [{n: t.detach().contiguous().numpy() for n, t in zip(names, s)} for s in samples] or \
            [{n: t.detach().contiguous().numpy() for n, t in zip(names, subject.example)}]
    with tempfile.TemporaryDirectory(prefix="mobilize-lint-") as tmp:
        opts = session_options(cfg.time_threads, optimized_path=Path(tmp) / "optimized.onnx",
                               profile_prefix=Path(tmp) / "profile")
        from mobilize.backends.onnxruntime.runtime import describe_load_error
        from mobilize.core.errors import UnsupportedModelError, translate_errors

        # onnxruntime's Fail / InvalidGraph / NotImplemented: its message names the node
        with translate_errors(UnsupportedModelError, "ONNX Runtime session",
                              message=lambda exc: describe_load_error(Path("model.onnx"), exc)):
            session = ort_session(proto, opts)
        for i in range(cfg.time_warmup + cfg.time_runs):
            session.run(None, feeds[i % len(feeds)])
        events = json.loads(Path(session.end_profiling()).read_text())
        optimized = onnx.load(opts.optimized_model_filepath)
    outputs = {n.name: list(n.output) for n in optimized.graph.node}
    runs: dict[str, list[int]] = collections.defaultdict(list)
    for e in sorted(events, key=lambda e: e.get("ts", 0)):
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            runs[e["name"][: -len("_kernel_time")]].append(int(e.get("dur", 0)))
    # each run profiles every node once: skip the warm-up runs, then the median run (steady on a busy machine)
    per_node = {name: statistics.median(durations[cfg.time_warmup:] or durations) for name, durations in runs.items()}
    _attribute(profile, per_node, outputs, scopes)
    samples_from = f"samples of '{data_reference}'" if samples else "a seeded random input"
    return (f"onnxruntime {ort.__version__} (CPUExecutionProvider, graph optimization all), {cfg.time_threads} thread(s), "
            f"median of {cfg.time_runs} runs on {samples_from}")


def _attribute(profile: Profile, per_node: dict[str, float], outputs: dict[str, list[str]],
               scopes: OnnxScopes) -> None:
    """Median microseconds per node -> each row's time per run and share of the total."""
    index = _row_index(profile)
    times_us: collections.Counter = collections.Counter()
    unattributed = 0
    for name, dur_us in per_node.items():
        path = scopes.module_of(name, outputs.get(name, ()))
        row = _row_for(path, index) if path is not None else None
        if row is None:
            unattributed += dur_us
        else:
            times_us[row] += dur_us
    if unattributed:
        profile.rows.append(LayerRow(UNATTRIBUTED, "layout reorders and other nodes ONNX Runtime added"))
        times_us[len(profile.rows) - 1] += unattributed
    total_us = sum(times_us.values())
    for i, row in enumerate(profile.rows):
        us = times_us.get(i, 0)
        row.time_ms = us / 1000.0
        row.time_share = us / total_us if total_us else 0.0
    profile.total_time_ms = total_us / 1000.0


def _row_index(profile: Profile) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, row in enumerate(profile.rows):
        if row.module.endswith(OPS_SUFFIX):
            index.setdefault(row.module, i)
        else:
            for member in row.members:
                index.setdefault(member, i)
            index.setdefault(row.module, i)
    return index


def _row_for(path: str, index: dict[str, int]) -> int | None:
    """The row of a module path: its own row, or the ops row of it or its nearest parent."""
    if path in index:
        return index[path]
    current = path
    while True:
        if ops_row(current) in index:
            return index[ops_row(current)]
        if not current:
            return None
        current = current.rpartition(".")[0]
