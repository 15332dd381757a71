"""Thin orchestration over the stages; the CLI only parses arguments and calls these.

    >>> import mobilize
    >>> report = mobilize.bench("zoo:conv_bn_relu", mobilize.BenchConfig(iterations=20, threads=1))
    Starting benchmark.
    ...
    >>> report["latency_ms_p50"] > 0, report["input_source"]
    (True, 'random-with-seed:0')
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

from mobilize.bench.harness import BenchConfig, benchmark
from mobilize.core.errors import ConfigError
from mobilize.runtimes.base import open_session, session_class
from mobilize.core.inputs import InputSpec, make_random_inputs
from mobilize.core.artifact import artifact_size_bytes
from mobilize.core.backend import profiled_every_file
from mobilize.sources.models import module_size_bytes, resolve_model
from mobilize.sources.reference import ModelRef

from mobilize.report.json_report import SCHEMA_VERSION  # noqa: E402  (one definition for every JSON output)
from mobilize.core.checks import default_threads
from mobilize.compare.entry import compare
from mobilize.core.paths import check_output_dir, model_stem
from mobilize.plans.facts import calibration_for, default_data, input_names, model_facts_isolated
from mobilize.core.text import a

__all__ = ["SCHEMA_VERSION", "bench", "build_and_verify", "generate", "tune", "verify", "calibration_for", "check_output_dir", "compare", "default_data",
           "default_threads", "load", "model_facts_isolated", "model_stem", "optimize"]


def load(reference: str, *, runtime: str | None = None, threads: int | None = None, trust_pickle: bool = False):
    """Resolve a model reference and open a Session on it."""
    return open_session(resolve_model(reference, trust_pickle=trust_pickle), runtime, threads)


def bench(reference: str, config: BenchConfig = BenchConfig(), *,
          echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Benchmark one model reference or artifact as ``config`` says; returns the report dict (units in names)."""
    runtime, threads, no_inputs, bundled_input = config.runtime, config.threads, config.no_inputs, config.bundled_input
    input_specs = list(config.input_specs) or None
    data, seed, trust_pickle, io_binding = config.data, config.seed, config.trust_pickle, config.io_binding
    from mobilize.core.checks import check_at_least, check_threads
    from mobilize.runtimes.base import RuntimeOptions

    check_threads(threads)
    check_at_least(config.iterations, 1, "--iter")
    check_at_least(config.warmup, 0, "--warmup")
    threads = threads or default_threads()
    target = resolve_model(reference, trust_pickle=trust_pickle, bound_args=config.bound_args)
    cls = session_class(target, runtime)
    if not cls.measures_latency:
        raise ConfigError(f"runtime '{cls.name}' checks numbers on this host but does not run the real runtime: "
                          f"its latency is on device only", hint="benchmark it on the device (see the adb script "
                                                                  "next to the file) and read the log with --from-log")
    cls.check_available()
    cls.import_backend()
    t0 = time.perf_counter_ns()
    session = open_session(target, runtime, threads, RuntimeOptions(extra={"io_binding": True} if io_binding else {}))
    load_ms = (time.perf_counter_ns() - t0) / 1e6
    try:
        inputs, source, specs = _choose_inputs(session, target, input_specs, no_inputs, bundled_input, data, seed)
        if config.bound_args:
            source += " with " + ", ".join(f"{k}={v!r}" for k, v in config.bound_args.items())
        result = benchmark(session, inputs, config, echo=echo)
        details = session.details()
    finally:
        session.close()
    from mobilize.report.bench_report import BenchReport

    path = getattr(target, "path", None)
    return BenchReport(
        model=str(reference), format=str(target.format), runtime=session.name, threads=threads,
        warmup=config.warmup, iterations=config.iterations,
        size_bytes=(artifact_size_bytes(path, target.format) if path is not None else module_size_bytes(target.module)),
        input_source=source, input_specs=[s.to_json() for s in specs],
        notes=list(getattr(target, "notes", [])) + session.notes, stats=result.stats, load_ms=load_ms,
        first_run_ms=result.first_run_ms, peak_rss_mb=result.peak_rss_mb, details=details, outputs=result.outputs,
    ).to_result()


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
        if not specs or any(d <= 0 for s in specs for d in s.shape):
            raise ConfigError("--data needs the model's input shapes", hint='give --input_dims, e.g. "1,3,224,224" '
                                                                           'or "1,128;1,128"')
        source = open_data(data)
        module = getattr(target, "module", None)
        names = input_names(module, len(specs)) if module is not None else []
        # the one reading of samples compare and tune use too: an .npz sample may be a whole input or one row of it
        inputs = source.sample_lists(specs, 1, names or None)[0]
        return inputs, f"data:{data}" + ("" if len(specs) == 1 else " (first sample)"), specs
    if input_specs:
        return make_random_inputs(input_specs, seed), f"random-with-seed:{seed}", list(input_specs)
    inputs = session.example_inputs(seed)
    specs = session.declared_input_specs() or target.input_specs
    return inputs, f"random-with-seed:{seed}", list(specs)


def _dtype_name(t) -> str:
    name = str(t.dtype).replace("torch.", "")
    return "float" if name == "float32" else name


def optimize(
    reference: str,
    recipe: Any = "seed",
    *,
    out_dir: Any = "out",
    data: str | None = None,
    engine: str | None = None,
    target: str | None = None,
    input_specs: Sequence[InputSpec] | None = None,
    trust_pickle: bool = False,
    verify: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    isolate: bool = True,
    log_path: Any = None,
    bound_args: dict[str, Any] | None = None,
    task: str | None = None,
) -> dict[str, Any]:
    """Run a recipe's passes and exporters; write artifacts and manifests; verify each artifact (``task``: the
    model's task, :mod:`mobilize.accuracy.tasks`; None: guessed from the float model's outputs, and noted).

    The work runs in a child process (unless ``isolate=False``), so a native crash in an exporter or a
    runtime is an error naming its stage (``log_path``: where that process's stderr goes, for the error's
    last lines).  Files are written into a staging folder inside ``out_dir`` and moved into place only
    when every artifact was built and verified: a failed run leaves no artifact and no manifest."""
    import shutil

    from mobilize.core import paths
    from mobilize.pipeline.isolate import run_isolated
    from mobilize.pipeline.recipe import Recipe, load_recipe
    from mobilize.sources.data import open_data
    from mobilize.core.target import Target

    from mobilize.sources.models import check_reference

    recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    if engine:
        recipe = recipe.with_option("engine", engine)
    Target.parse(target)
    ref = check_reference(reference)  # a bad reference, --data or --target fails before any work; parsed once
    paths.safe_name(recipe.name, "recipe name")  # a Recipe built in Python skips from_dict's check
    model_stem(ref.text)
    if data:
        open_data(data)
    out = check_output_dir(out_dir)
    staging = paths.staging_dir(out)
    job = (ref, recipe.to_dict(), str(staging), data, target, list(input_specs or []), trust_pickle, verify,
           dict(bound_args or {}), task)
    try:
        if isolate:
            report = run_isolated(build_and_verify, *job, what="optimize", progress=progress, log_path=log_path,
                                  crash_hint="nothing was written")
        else:
            report = build_and_verify(*job, progress=progress)
        paths.commit_staging(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return paths.relocate(report, staging, out)


def build_and_verify(reference: str | ModelRef, recipe: dict[str, Any], out_dir: str, data: str | None, target: str | None,
                     input_specs: list[InputSpec], trust_pickle: bool, verify: bool, bound_args: dict[str, Any] | None = None,
                     task: str | None = None, progress: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """optimize's work (in its child process): resolve the model, run the recipe, verify every artifact.

    Long because it is one sequence in one child (resolve, build, verify each file, write the manifest), each step
    reporting progress to the parent; split, the steps would pass the same eight values between them."""

    from mobilize.pipeline.build import build, verify_artifact
    from mobilize.core.context import Context
    from mobilize.core.errors import AccuracyError
    from mobilize.pipeline.recipe import Recipe
    from mobilize.sources.data import open_data
    from mobilize.core.target import Target, host_cpu

    recipe = Recipe.from_dict(recipe, recipe.get("name", "custom"))
    source = resolve_model(reference, trust_pickle=trust_pickle, bound_args=bound_args)
    reference = str(reference)  # the text, for names and messages
    ctx = Context(input_specs=list(input_specs or source.input_specs), data=open_data(data) if data else None,
                  target=Target.parse(target), bound_args=dict(bound_args or {}))
    model = getattr(source, "module", source)
    if hasattr(source, "module"):
        ctx.input_names = input_names(source.module, len(ctx.input_specs))
    if not hasattr(source, "module") and not ctx.input_specs:
        with open_session(source) as s:
            ctx.input_specs = list(s.declared_input_specs() or [])
    total = len(recipe.passes) + len(recipe.exports) * (2 if verify else 1)
    done = 0

    def step(text: str) -> None:
        nonlocal done
        if progress:
            progress(done, total, text)
        done += 1

    _check_forward(source, ctx, reference)
    result = build(model, recipe, ctx, Path(out_dir) / f"{model_stem(reference)}-{recipe.name}", echo=step)
    artifacts, mismatches = [], []
    for built in result.artifacts:
        art = built.artifact
        entry = {"artifact": str(art.path), "format": str(art.format), "size_bytes": art.size_bytes,
                 "sha256": art.sha256, "kind": str(built.kind), "notes": art.notes}
        if verify:
            step(f"verify {art.path.name}")
            verdict = verify_artifact(built, result.module, ctx, float_model=model,
                                      quantized=ctx.quant.quantized, task=task)
            entry["verify"] = verdict.to_json()
            # VACUOUS: measured against a reference too small for float32, the numbers blame its scale, not the
            # file (compare calls it so too); the warning goes into the notes below, the file is kept
            if verdict.fidelity and verdict.fidelity["outcome"] not in ("OK", "VACUOUS"):
                mismatches.append(f"{art.path.name}: {verdict.fidelity['reason']}")
            if verdict.reference_warning and verdict.reference_warning not in ctx.notes:
                ctx.notes.append(verdict.reference_warning)
        if "delegation" in built.details or profiled_every_file(art.format):  # an op count was printed
            from mobilize.pipeline.build import verify_inputs
            from mobilize.profile import time_notes

            # a few runs: ETDump weighs each op by time for the cost of running the file a few times
            art.notes.extend(time_notes(art.path, verify_inputs(ctx, 1)[0], threads=1, details=entry, runs=3))
        artifacts.append(entry)
    from mobilize.pipeline.build import random_inputs_warning

    weak = random_inputs_warning(ctx) if verify and artifacts else None
    report = {"schema_version": SCHEMA_VERSION, "model": reference, "recipe": recipe.to_dict(),
              "target": ctx.target.to_json(), "host_cpu": host_cpu().to_json(), "warnings": [weak] if weak else [],
              "artifacts": artifacts, "notes": list(ctx.notes), "timings_ms": ctx.timings_ms,
              **({"bound_args": dict(ctx.bound_args)} if ctx.bound_args else {})}
    if progress:
        progress(total, total, "done")
    if mismatches:
        raise AccuracyError("artifacts do not match the prepared model: " + "; ".join(mismatches), stage="verify",
                            hint="nothing was written; --no-verify keeps files that were not checked")
    return report


def _check_forward(source: Any, ctx: Any, reference: str) -> None:
    """One forward of the model on seeded inputs before any export: a model that fails on the given input
    shape, or returns no tensor at all, is told so here, in one line, instead of deep inside an exporter."""
    from mobilize.core.errors import UnsupportedModelError

    if not hasattr(source, "module") or not ctx.input_specs or any(d <= 0 for s in ctx.input_specs for d in s.shape):
        return
    with open_session(source) as session:
        outputs = session.run(ctx.example_inputs())
    if not outputs:
        raise UnsupportedModelError(f"the forward of '{reference}' returned no tensor",
                                    hint="forward must return a tensor, a tuple or a dict of tensors")




def tune(reference: str | ModelRef, *, data: str, policy: Any = None, runtimes: Sequence[str] | None = None,
         out_dir: str = "out/tune", time_budget_s: float | None = None, prune: Sequence[float] = (),
         target: str = "host", echo: Callable[[str], None] = lambda _text: None) -> Any:
    """``mobilize tune`` as a function: the fastest file within ``policy``'s budget (default: the Policy's), searched
    over ``runtimes`` (None: those tune searches by default); returns the typed :class:`mobilize.tune.result.TuneResult` (files and reports in ``out_dir``)."""
    from mobilize.accuracy.verify import DEFAULT_POLICY
    from mobilize.tune.run import tune as search

    source = resolve_model(reference)
    if not hasattr(source, "module"):
        raise ConfigError(f"tune searches from a PyTorch model; {reference} is {a(str(source.format))} file",
                          hint="give the model's code (zoo:NAME, file.py:Class, pkg.mod:factory)")
    return search(source.module, list(source.input_specs), data=data, policy=policy or DEFAULT_POLICY,
                  runtimes=runtimes, out_dir=out_dir, stem=model_stem(str(reference)), time_budget_s=time_budget_s,
                  prune=prune, target=target, echo=echo)


def verify(path: str, *, model: str | None = None, data: str | None = None, samples: int = 64,
           cpu: str = "cortex-a76", policy: Any = None) -> dict[str, Any]:
    """``mobilize verify FILE --on arm64`` as a function: the file's outputs on arm64 kernels under QEMU and on the
    host, both judged against ``model`` (or the same file on the host); the arm64 root must exist
    (``scripts/setup-arm64.sh``)."""
    from mobilize.arm64 import require_arm64, verify_file

    require_arm64(cpu)
    return verify_file(path, model=model, data=data, samples=samples, cpu=cpu, policy=policy)


def generate(package: str | Path, prompt: str, *, max_new_tokens: int = 64, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, seed: int = 0, chat: bool = False, threads: int | None = None,
             on_text: Callable[[str], None] | None = None) -> Any:
    """Text from a decoder package compare or optimize wrote (``artifacts/NAME/``), in its own engine: greedy by
    default, sampled with ``temperature`` > 0; ``on_text`` gets each new piece as it is produced.  Returns a
    :class:`mobilize.generation.generate.Generated` (text, token ids, why it stopped, time to first token, tokens/s).

        >>> import mobilize
        >>> try:
        ...     mobilize.generate("no/such/folder", "import os")
        ... except mobilize.ConfigError as exc:
        ...     print(str(exc).split(" (")[0])
        no/such/folder does not exist
    """
    from mobilize.generation.generate import GenerateConfig, Sampling, generate as run

    sampling = Sampling(temperature, top_k, top_p, seed)
    return run(package, GenerateConfig(prompt, max_new_tokens, sampling, chat, threads), on_text=on_text)
