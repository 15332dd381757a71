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
    io_binding: bool = False,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Benchmark one model reference or artifact; returns the report dict (units in names)."""
    from mobilize.runtimes.base import RuntimeOptions

    threads = threads or default_threads()
    target = resolve_model(reference, trust_pickle=trust_pickle)
    cls = session_class(target, runtime)
    cls.check_available()
    cls.import_backend()
    t0 = time.perf_counter_ns()
    session = open_session(target, runtime, threads, RuntimeOptions(io_binding=io_binding))
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

    if ctx.data is not None and len(ctx.input_specs) == 1:
        spec = ctx.input_specs[0]
        inputs = [next(iter(ctx.data.batches(spec, limit=spec.shape[0])))[0]]
    else:
        inputs = ctx.example_inputs(seed=123)
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


def default_data(reference: str, specs: Sequence[InputSpec]) -> str | None:
    """Labelled digits for the digits model, the sample photos for other image models, else None."""
    if "digits" in reference:
        return "digits:test"
    if specs and len(specs[0].shape) == 4 and specs[0].shape[1] in (1, 3):
        return "sample-photos"
    return None


def calibration_for(data: str | None) -> tuple[str | None, str | None]:
    """Calibration source for an accuracy source, and a note when they overlap."""
    if data is None:
        return None, None
    if data.startswith("digits"):
        return "digits:train", None
    return data, f"calibration and accuracy both use {data}: give held-out data for an unbiased accuracy figure"


def compare(
    reference: str | None = None,
    *,
    plan: Any = "default",
    data: str | None = None,
    out_dir: Any = "out/compare",
    threads: int | None = None,
    iterations: int = 50,
    rounds: int = 5,
    variants: Sequence[str] = (),
    input_specs: Sequence[InputSpec] | None = None,
    accuracy_samples: int = 1000,
    timeout_s: float = 600.0,
    trust_pickle: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run every variant of a plan on real data; write report.json and report.html as it goes."""
    import datetime

    import mobilize
    from mobilize.compare.runner import CompareConfig, run_plan
    from mobilize.plan import Plan, load_plan
    from mobilize.report.json_report import SCHEMA_VERSION, write_reports
    from mobilize.zoo import DEFAULT_MODEL

    reference = reference or f"zoo:{DEFAULT_MODEL}"
    plan = plan if isinstance(plan, Plan) else load_plan(plan)
    if variants:
        plan = plan.select(list(variants))
    if iterations < 1 or rounds < 1:
        raise ConfigError("--iter and --rounds must be at least 1")
    out = check_output_dir(out_dir)
    target = resolve_model(reference, trust_pickle=trust_pickle)
    if not hasattr(target, "module"):
        raise ConfigError(f"compare needs a PyTorch model to derive variants from; {reference} is a {target.format} file",
                          hint="use mobilize bench for a single artifact")
    specs = list(input_specs or target.input_specs)
    if not specs:
        raise ConfigError("the model's input shape is unknown", hint='give --input_dims, e.g. "1,3,224,224"')
    data = data or default_data(reference, specs)
    _check_data_fits(target, specs, data)
    calibration, note = calibration_for(data)
    cfg = CompareConfig(model=reference, data=data, calibration=calibration, input_specs=tuple(specs),
                        out_dir=str(out), threads=threads or default_threads(), iterations=iterations, rounds=rounds,
                        accuracy_samples=accuracy_samples, timeout_s=timeout_s, trust_pickle=trust_pickle)
    meta = {"schema_version": SCHEMA_VERSION, "mobilize_version": mobilize.__version__,
            "created": datetime.datetime.now().isoformat(timespec="seconds"),
            "input_specs": [s.to_json() for s in specs], "notes": [note] if note else []}

    def save(report: dict[str, Any]) -> None:
        for key, value in meta.items():
            report.setdefault(key, value)
        write_reports(report, out)

    report = run_plan(cfg, plan, progress=progress, on_update=save)
    save(report)
    return report


def _check_data_fits(target, specs: Sequence[InputSpec], data: str | None) -> None:
    """Before any work: the data source gives inputs the model accepts."""
    import torch

    from mobilize.sources.data import open_data

    if data is None:
        return
    if len(specs) != 1:
        raise ConfigError("--data feeds models with one input only")
    source = open_data(data)
    one = type(specs[0])((1, *specs[0].shape[1:]), specs[0].dtype, specs[0].memory_format)
    x, _ = next(iter(source.batches(one, limit=1)))
    try:
        with torch.inference_mode():
            target.module(x)
    except Exception as exc:
        from mobilize.runtimes.base import first_error_line

        raise ConfigError(f"data source '{data}' does not fit the model: {first_error_line(exc)}",
                          hint="check --data and --input_dims") from exc
