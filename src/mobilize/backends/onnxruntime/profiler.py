"""Per-node times of an ``.onnx`` from ONNX Runtime's profiler, with the execution provider each node ran on.

``SessionOptions.enable_profiling`` writes a Chrome trace: one ``model_run`` event per run and one
``<node>_kernel_time`` event per node, with ``args.op_name`` and ``args.provider``.  The nodes of
each run are those inside its ``model_run`` window; warm-up runs are dropped and each node's
median over the rest is kept.  The "delegate" is the first execution provider of the session that
is not ONNX Runtime's own CPU one (XNNPACK, OpenVINO, ...): nodes left on ``CPUExecutionProvider``
beside it are the fallbacks.  With the CPU provider alone there is no delegate and no fallback.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any, Sequence

from mobilize.backends.onnxruntime.sessions import ort_session, session_options
from mobilize.profile.core import OpTime, TimeProfile

SOURCE = "ONNX Runtime profiler"
CPU = "CPUExecutionProvider"
RUNS = 20
WARMUP = 3


def trace_runs(events: Sequence[dict[str, Any]]) -> list[tuple[float, list[dict[str, Any]]]]:
    """(``model_run`` duration in us, the node kernel events inside it) per run, in order."""
    nodes = [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")
             and "op_name" in (e.get("args") or {})]
    runs = []
    for run in sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                      key=lambda e: e["ts"]):
        start, end = run["ts"], run["ts"] + run["dur"]
        runs.append((float(run["dur"]), [n for n in nodes if start <= n["ts"] and n["ts"] + n["dur"] <= end]))
    return runs


def profile_from_trace(events: Sequence[dict[str, Any]], path: str, threads: int, warmup: int,
                       delegate: str | None) -> TimeProfile:
    """A :class:`TimeProfile` from the profiler's JSON events; ``delegate``: the accelerated provider, or None."""
    all_runs = trace_runs(events)
    runs = all_runs[warmup:] or all_runs
    per_node: dict[tuple[str, str, str], list[float]] = collections.defaultdict(list)
    for _, nodes in runs:
        this: dict[tuple[str, str, str], float] = collections.defaultdict(float)
        for n in nodes:
            args = n["args"]
            this[(n["name"][: -len("_kernel_time")], args["op_name"], args.get("provider") or CPU)] += float(n["dur"])
        for key, us in this.items():
            per_node[key].append(us)
    ops = [OpTime(op, node, provider, delegate is not None and provider == delegate,
                  statistics.median(spans + [0.0] * (len(runs) - len(spans))))
           for (node, op, provider), spans in per_node.items()]
    total = statistics.median(d for d, _ in runs) if runs else 0.0
    profile = TimeProfile(path, "onnxruntime", SOURCE, delegate, threads, len(runs), total, ops)
    if not runs:
        profile.available, profile.reason = False, "the ONNX Runtime profile holds no model_run event"
    return profile


def profile_onnx(path: Path, inputs: Sequence[Any], threads: int = 1, runs: int = RUNS, warmup: int = WARMUP,
                 providers: Sequence[str] = (CPU,), optimized_path: Path | None = None) -> TimeProfile:
    """Profile ``path`` under ONNX Runtime on ``inputs`` (torch tensors or arrays, in input order); the graph
    ONNX Runtime optimized and ran is saved at ``optimized_path`` when given."""
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="mobilize-ortprof-") as tmp:
        opts = session_options(threads, profile_prefix=os.path.join(tmp, "prof"), optimized_path=optimized_path)
        session = ort_session(Path(path), opts, providers)
        feed = {}
        for meta, x in zip(session.get_inputs(), inputs):
            array = np.asarray(getattr(x, "numpy", lambda: x)())
            feed[meta.name] = array.astype(np.float32) if meta.type == "tensor(float)" else array
        for _ in range(warmup + runs):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
        used = session.get_providers()
    delegate = next((p for p in used if p != CPU), None)
    profile = profile_from_trace(events, str(path), threads, warmup, delegate)
    profile.notes.append("the profiler adds a fixed cost per node: compare shares and files, not these totals with "
                         "benchmark latencies")
    return profile
