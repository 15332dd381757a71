"""A decoder file's memory as an app would hold it: a fresh process that imports only the file's runtime (the
variant's ``runtime`` modules; its resident memory then is the runtime's bare ``baseline_mb``), loads the file,
runs the prompt to its first token and decodes a few tokens; ``peak_mb`` is that process's peak resident memory
(Linux ``VmHWM``) and ``footprint_mb`` = peak - baseline, what the file itself costs beyond its runtime.

compare's checking worker and the shared timing host hold torch, the float model's answers and other files (their
``peak_rss_mb`` is theirs, not the file's): this figure is taken apart from them, in its own process, started
fresh (not forked from a process that has torch loaded).

    >>> footprint_from({"baseline_mb": 40.0, "peak_mb": 52.5})["footprint_mb"]
    12.5
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

STEPS = 8
"""Tokens decoded after the first (the cache and the decode's own buffers are made by then)."""


def footprint_from(figures: dict[str, Any]) -> dict[str, Any]:
    return {**figures, "footprint_mb": round(figures["peak_mb"] - figures["baseline_mb"], 1)}


def measure_footprint(name: str, path: Path, threads: int, max_len: int, prompt: Sequence[int],
                      timeout_s: float = 600.0) -> dict[str, Any]:
    """``baseline_mb``, ``peak_mb`` and ``footprint_mb`` of variant ``name``'s file at ``path`` (see the module
    docstring), or ``{"error": why}`` when the child could not measure it (the file's own check already judged it)."""
    request = json.dumps({"name": name, "path": str(path), "threads": threads, "max_len": max_len,
                          "prompt": [int(t) for t in prompt]})
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TRANSFORMERS_VERBOSITY": "error"}
    try:
        done = subprocess.run([sys.executable, "-m", "mobilize.generation.footprint"], input=request, text=True,
                              capture_output=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"not measured: its process took over {timeout_s:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {"error": f"not measured: its process failed ({tail[:200]})"}
    return footprint_from(json.loads(lines[-1]))


def _rss_mb(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    raise OSError(f"no {key} in /proc/self/status")


def _child() -> None:
    import importlib

    request = json.loads(sys.stdin.read())
    from mobilize.generation.plan import generation_variants

    [variant] = generation_variants([request["name"]])
    for module in variant.runtime:
        importlib.import_module(module)
    baseline = _rss_mb("VmRSS")
    session = variant.load(Path(request["path"]), int(request["threads"]), int(request["max_len"]))
    prompt = request["prompt"]
    session.first(prompt)
    room = int(request["max_len"]) - len(prompt) - 1
    for token in prompt[:max(0, min(STEPS, room))]:
        session.step(int(token))
    peak = _rss_mb("VmHWM")
    session.close()
    print(json.dumps({"baseline_mb": round(baseline, 1), "peak_mb": round(peak, 1),
                      "runtime": list(variant.runtime)}), flush=True)


if __name__ == "__main__":
    _child()
