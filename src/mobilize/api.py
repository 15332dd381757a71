"""Thin orchestration over the stages; the CLI only parses arguments and calls these.

    >>> import mobilize
    >>> report = mobilize.bench("zoo:conv_bn_relu", threads=1, config=mobilize.BenchConfig(iterations=20))
    Starting benchmark.
    ...
    >>> report["latency_ms_p50"] > 0, report["input_source"]
    (True, 'random-with-seed:0')
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

from mobilize.bench.harness import BenchConfig, benchmark
from mobilize.errors import ConfigError
from mobilize.runtimes.base import open_session, session_class
from mobilize.sources.inputs import InputSpec, make_random_inputs
from mobilize.sources.models import resolve_model

SCHEMA_VERSION = 1


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load(reference: str, *, runtime: str | None = None, threads: int | None = None, trust_pickle: bool = False):
    """Resolve a model reference and open a Session on it."""
    return open_session(resolve_model(reference, trust_pickle=trust_pickle), runtime, threads)


def bench(
    reference: str,
    *,
    runtime: str | None = None,
    threads: int | None = None,
    input_specs: Sequence[InputSpec] | None = None,
    no_inputs: bool = False,
    bundled_input: int | None = None,
    data_inputs: Sequence[Any] | None = None,
    data_label: str | None = None,
    seed: int = 0,
    config: BenchConfig = BenchConfig(),
    trust_pickle: bool = False,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Benchmark one model reference or artifact; returns the report dict (units in names)."""
    threads = threads or default_threads()
    target = resolve_model(reference, trust_pickle=trust_pickle)
    cls = session_class(target, runtime)
    cls.check_available()
    cls.import_backend()
    t0 = time.perf_counter_ns()
    session = open_session(target, runtime, threads)
    load_ms = (time.perf_counter_ns() - t0) / 1e6
    try:
        inputs, source, specs = _choose_inputs(session, target, input_specs, no_inputs, bundled_input,
                                               data_inputs, data_label, seed)
        result = benchmark(session, inputs, config, echo=echo)
    finally:
        session.close()
    path = getattr(target, "path", None)
    return {
        "schema_version": SCHEMA_VERSION,
        "model": reference,
        "format": str(target.format),
        "runtime": session.name,
        "threads": threads,
        "warmup": config.warmup,
        "iterations": config.iterations,
        "size_bytes": path.stat().st_size if path is not None else _module_size_bytes(target.module),
        "load_ms": load_ms,
        "first_run_ms": result.first_run_ms,
        **{k: v for k, v in result.stats.to_json().items() if k != "iterations"},
        "peak_rss_mb": result.peak_rss_mb,
        "input_source": source,
        "input_specs": [s.to_json() for s in specs],
        "notes": list(getattr(target, "notes", [])) + session.notes,
        "_outputs": result.outputs,
    }


def _choose_inputs(session, target, input_specs, no_inputs, bundled_input, data_inputs, data_label, seed):
    if no_inputs:
        return [], "none", []
    if bundled_input is not None:
        bundled = session.bundled_inputs()
        if not 0 <= bundled_input < len(bundled):
            raise ConfigError(f"--use_bundled_input {bundled_input} is out of range: the file bundles {len(bundled)} input(s)")
        inputs = bundled[bundled_input]
        return inputs, f"bundled:{bundled_input}", [InputSpec(tuple(t.shape), _dtype_name(t)) for t in inputs]
    if data_inputs is not None:
        return list(data_inputs), f"data:{data_label}", [InputSpec(tuple(t.shape), _dtype_name(t)) for t in data_inputs]
    if input_specs:
        return make_random_inputs(input_specs, seed), f"random-with-seed:{seed}", list(input_specs)
    inputs = session.example_inputs(seed)
    specs = session.declared_input_specs() or target.input_specs
    return inputs, f"random-with-seed:{seed}", list(specs)


def _dtype_name(t) -> str:
    name = str(t.dtype).replace("torch.", "")
    return "float" if name == "float32" else name


def _module_size_bytes(module) -> int:
    return sum(t.numel() * t.element_size() for t in list(module.parameters()) + list(module.buffers()))
