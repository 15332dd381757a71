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
    data: str | None = None,
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
        inputs, source, specs = _choose_inputs(session, target, input_specs, no_inputs, bundled_input, data, seed)
        result = benchmark(session, inputs, config, echo=echo)
        details = session.details()
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
        **details,
        "_outputs": result.outputs,
    }


def _choose_inputs(session, target, input_specs, no_inputs, bundled_input, data, seed):
    if no_inputs:
        return [], "none", []
    if bundled_input is not None:
        bundled = session.bundled_inputs()
        if not 0 <= bundled_input < len(bundled):
            raise ConfigError(f"--use_bundled_input {bundled_input} is out of range: the file bundles {len(bundled)} input(s)")
        inputs = bundled[bundled_input]
        return inputs, f"bundled:{bundled_input}", [InputSpec(tuple(t.shape), _dtype_name(t)) for t in inputs]
    if data is not None:
        from mobilize.sources.data import open_data

        specs = list(input_specs or session.declared_input_specs() or target.input_specs)
        if len(specs) != 1 or any(d <= 0 for d in specs[0].shape):
            raise ConfigError("--data feeds one input of known shape", hint='give --input_dims, e.g. "1,3,224,224"')
        x, _ = next(iter(open_data(data).batches(specs[0], limit=specs[0].shape[0])))
        return [x], f"data:{data}", specs
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


def model_stem(reference: str) -> str:
    """A file-name stem for a model reference: zoo:mobilenet_v2 → mobilenet_v2, net.py:Net → Net."""
    from pathlib import Path

    tail = reference.split(":", 1)[1] if reference.startswith("zoo:") else reference
    if ":" in tail and tail.rpartition(":")[0].endswith(".py"):
        tail = tail.rpartition(":")[2]
    elif ":" in tail:
        tail = tail.rpartition(":")[2]
    return Path(tail).stem or "model"


def check_output_dir(out_dir) -> "Path":
    """Fail before any work if the output folder cannot be used."""
    from pathlib import Path

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output folder {out} is a file", hint="give a folder path with -o")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output folder {out}: {exc.strerror}") from exc
    if not os.access(out, os.W_OK):
        raise ConfigError(f"output folder {out} is not writable")
    return out


def optimize(
    reference: str,
    recipe: Any = "seed",
    *,
    out_dir: Any = "out",
    data: str | None = None,
    engine: str | None = None,
    input_specs: Sequence[InputSpec] | None = None,
    trust_pickle: bool = False,
    verify: bool = True,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run a recipe's passes and exporters; write artifacts and manifests; verify each artifact."""
    from mobilize.errors import AccuracyError
    from mobilize.exporters import EXPORTERS
    from mobilize.passes import PASSES
    from mobilize.passes.base import Context
    from mobilize.recipe import Recipe, load_recipe
    from mobilize.sources.data import open_data

    recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    if engine:
        recipe = recipe.with_option("engine", engine)
    out = check_output_dir(out_dir)
    target = resolve_model(reference, trust_pickle=trust_pickle)
    ctx = Context(input_specs=list(input_specs or target.input_specs),
                  data=open_data(data) if data else None)
    ctx.state["reference"] = reference
    if hasattr(target, "module"):
        module = target.module
    else:
        if recipe.passes:
            raise ConfigError(f"recipe '{recipe.name}' has passes, which need a PyTorch model; {reference} is a "
                              f"{target.format} file", hint="use a model reference (zoo:, file.py:Class) or a recipe without passes")
        module = target
        if not ctx.input_specs:
            from mobilize.runtimes.base import open_session as _open

            with _open(target) as s:
                ctx.input_specs = list(s.declared_input_specs() or [])
    for step in recipe.passes:
        echo(f"pass {step.name} ...")
        module = PASSES.get(step.name)(step.config)(module, ctx)
    stem = out / f"{model_stem(reference)}-{recipe.name}"
    artifacts, mismatches = [], []
    for step in recipe.exports:
        echo(f"export {step.name} ...")
        exporter = EXPORTERS.get(step.name)(step.config)
        art = exporter.export(module, ctx, stem, recipe.to_dict())
        entry = {"artifact": str(art.path), "format": str(art.format), "size_bytes": art.size_bytes,
                 "sha256": art.sha256, "notes": art.notes}
        if verify:
            entry["verify"] = verify_artifact(art, module, ctx, exporter)
            if not entry["verify"]["ok"]:
                mismatches.append(f"{art.path.name}: max abs error {entry['verify']['max_abs']:.3g} > "
                                  f"tolerance {entry['verify']['tolerance']:.3g}")
        artifacts.append(entry)
    result = {"schema_version": SCHEMA_VERSION, "model": reference, "recipe": recipe.to_dict(),
              "artifacts": artifacts, "notes": list(ctx.notes), "timings_ms": ctx.timings_ms}
    if mismatches:
        raise AccuracyError("artifacts do not match the prepared model: " + "; ".join(mismatches), stage="verify")
    return result


def verify_artifact(art, module, ctx, exporter) -> dict[str, Any]:
    """Run the artifact and the prepared module on the same input; compare."""
    import torch

    from mobilize.runtimes.base import open_session

    inputs = ctx.calibration_inputs(1)[0] if ctx.data is not None else ctx.example_inputs(seed=123)
    session = open_session(art)
    try:
        got = session.run(inputs)
    finally:
        session.close()
    if hasattr(module, "forward"):
        with torch.inference_mode():
            from mobilize.runtimes.base import flatten_outputs

            expected = flatten_outputs(module(*inputs))
    else:
        ref = open_session(module)
        expected = ref.run(inputs)
        ref.close()
    max_abs = max(float((g.float() - e.dequantize().float() if e.is_quantized else g.float() - e.float()).abs().max())
                  for g, e in zip(got, expected))
    tolerance = exporter.verify_tolerance(ctx) if hasattr(exporter, "verify_tolerance") else exporter.tolerance
    return {"max_abs": max_abs, "tolerance": tolerance, "ok": max_abs <= tolerance}
