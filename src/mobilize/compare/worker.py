"""The per-variant worker process: build (passes + export), load, accuracy, then timed rounds on demand.

Runs in a spawned process so a crash or hang in a runtime cannot take the sweep down.  It
tells the parent which stage it is in before entering it, so a crash is attributed to the
right stage.  Messages are tuples: ("stage", name), ("built", info), ("ready", info),
("times", ns_list, total_ns), ("error", stage, message).
"""

from __future__ import annotations

import dataclasses
import resource
import time
import traceback
from typing import Any


@dataclasses.dataclass
class Job:
    kind: str
    """reference | build | run"""
    model: str
    variant: dict[str, Any]
    input_specs: list[dict[str, Any]]
    data: str | None
    calibration: str | None
    out_dir: str
    threads: int
    accuracy_samples: int
    reference_path: str
    artifact: str | None = None
    trust_pickle: bool = False


def main(conn, job: Job) -> None:
    stage = "start"

    def enter(name: str) -> None:
        nonlocal stage
        stage = name
        conn.send(("stage", name))

    try:
        import warnings

        warnings.simplefilter("ignore")
        import torch

        torch.set_num_threads(job.threads)
        if job.kind == "reference":
            enter("reference")
            conn.send(("done", make_reference(job)))
        elif job.kind == "build":
            enter("export")
            conn.send(("built", build(job)))
        else:
            serve(conn, job, enter)
    except BaseException as exc:  # reported to the parent with its stage; the parent decides
        from mobilize.errors import MobilizeError

        text = str(exc) if isinstance(exc, MobilizeError) else f"{type(exc).__name__}: {_first_line(exc)}"
        try:
            conn.send(("error", stage, text, traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass
    finally:
        conn.close()


def _first_line(exc: BaseException) -> str:
    from mobilize.runtimes.base import first_error_line

    return first_error_line(exc)


def _specs(job: Job):
    from mobilize.sources.inputs import InputSpec

    return [InputSpec.from_json(s) for s in job.input_specs]


def accuracy_set(job: Job) -> tuple[list, list | None]:
    """The accuracy inputs (batch of one each) and labels, or seeded random inputs without data."""
    from mobilize.sources.data import open_data
    from mobilize.sources.inputs import make_random_inputs

    spec = _specs(job)[0]
    if job.data is None:
        return [make_random_inputs([spec], seed)[0] for seed in range(min(job.accuracy_samples, 16))], None
    source = open_data(job.data)
    xs, ys = [], []
    one = dataclasses.replace(spec, shape=(1, *spec.shape[1:]))
    for x, y in source.batches(one, limit=job.accuracy_samples):
        xs.append(x)
        ys.append(y)
    return xs, (ys if all(y is not None for y in ys) else None)


def make_reference(job: Job) -> dict[str, Any]:
    import torch

    from mobilize.sources.models import resolve_model

    source = resolve_model(job.model, trust_pickle=job.trust_pickle)
    xs, ys = accuracy_set(job)
    with torch.inference_mode():
        outs = [source.module(x).float() for x in xs]
    torch.save({"outputs": torch.cat(outs), "labels": torch.cat(ys) if ys else None}, job.reference_path)
    return {"samples": len(xs), "labelled": ys is not None}


def _prepare(job: Job):
    """Resolve the model and run the variant's passes: (module, context)."""
    from mobilize.passes import PASSES
    from mobilize.passes.base import Context
    from mobilize.plan import Variant
    from mobilize.sources.data import open_data
    from mobilize.sources.models import resolve_model

    variant = Variant.from_dict(job.variant)
    source = resolve_model(job.model, trust_pickle=job.trust_pickle)
    ctx = Context(input_specs=_specs(job), data=open_data(job.calibration) if job.calibration else None)
    module = source.module
    for step in variant.recipe.passes:
        module = PASSES.get(step.name)(step.config)(module, ctx)
    return variant, module, ctx


def quantized(variant, ctx) -> bool:
    if ctx.state.get("quantized"):
        return True
    export = variant.export
    option = getattr(export.config, "quantize", None) if export else None
    return bool(option) and str(option) not in ("none", "None", "False")


def build(job: Job) -> dict[str, Any]:
    from pathlib import Path

    from mobilize.exporters import EXPORTERS

    variant, module, ctx = _prepare(job)
    exporter = EXPORTERS.get(variant.export.name)(variant.export.config)
    art = exporter.export(module, ctx, Path(job.out_dir) / variant.name, variant.recipe.to_dict())
    return {"artifact": str(art.path), "format": str(art.format), "size_bytes": art.size_bytes,
            "notes": art.notes, "quantized": quantized(variant, ctx),
            "details": dict(getattr(exporter, "details", None) or {})}


def serve(conn, job: Job, enter) -> None:
    import torch

    from mobilize.accuracy.metrics import ErrorStats, top1
    from mobilize.artifact import Artifact
    from mobilize.bench.harness import timed_loop
    from mobilize.plan import Variant
    from mobilize.runtimes.base import RuntimeOptions, open_session
    from mobilize.sources.inputs import apply_memory_format
    from mobilize.sources.models import ModelSource

    notes: list[str] = []
    if job.artifact:
        variant = Variant.from_dict(job.variant)
        target, specs, is_quantized = Artifact.from_file(job.artifact), _specs(job), None
    else:
        enter("passes")
        variant, module, ctx = _prepare(job)
        target = ModelSource(module, job.model, list(ctx.input_specs))
        specs, is_quantized = ctx.input_specs, quantized(variant, ctx)
        notes += ctx.notes
    enter("load")
    options = dict(variant.recipe.runtime.__dict__, threads=job.threads)
    t0 = time.perf_counter_ns()
    session = open_session(target, variant.runtime, options=RuntimeOptions(**options))
    load_ms = (time.perf_counter_ns() - t0) / 1e6
    notes += session.notes
    enter("run")
    xs, _ = accuracy_set(job)
    xs = [apply_memory_format(x, specs[0]) for x in xs]
    native = session.prepare([xs[0]])
    t0 = time.perf_counter_ns()
    session.checked_run(native, [xs[0]])
    first_run_ms = (time.perf_counter_ns() - t0) / 1e6
    enter("accuracy")
    outs = [session.run([x])[0] for x in xs]
    reference = torch.load(job.reference_path, weights_only=True)
    stats = ErrorStats.compare(outs, [reference["outputs"]]).to_json()
    if reference["labels"] is not None:
        stats["top1"] = top1(outs, [reference["labels"]])
    enter("bench")
    conn.send(("ready", {"runtime": session.name, "format": str(target.format), "load_ms": load_ms,
                         "first_run_ms": first_run_ms, "accuracy": stats, "notes": notes,
                         "quantized": is_quantized, "details": session.details(),
                         "size_bytes": getattr(target, "size_bytes", None) or _param_bytes(target)}))
    while True:
        command = conn.recv()
        if command[0] == "bench":
            times, total = timed_loop(session.run_prepared, native, command[1])
            conn.send(("times", times, total, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0))
        else:
            session.close()
            return


def _param_bytes(target) -> int | None:
    """Weights of an eager module (what a state_dict file of it would hold)."""
    module = getattr(target, "module", None)
    if module is None:
        return None
    import io

    import torch

    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    return buf.tell()
