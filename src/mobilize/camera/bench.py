"""``mobilize bench MODEL --frames nv21:1920x1080[:ROT]``: camera frame to answer, each stage timed.

Per frame: **convert** (the one-pass converter writes the model's input, in the layout the model
takes, into one buffer reused frame after frame), **feed** (the runtime's own input preparation of
that buffer: a view, not a copy, when the layout and dtype already match), **infer** (the timed call
plain ``bench`` times) and **answer** (outputs to torch, top-k).  The frame-to-answer time gets the
statistics ``bench`` prints; every stage gets its own p50 and its share of the frame.

    $ mobilize bench out/digits_mobilenet_v2.pte --frames nv21:1920x1080:90 --threads 2
    ...statistics block (frame to answer)...
      stage      p50 ms   mean ms   share
      convert     0.321     0.334   41.2%
      ...
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mobilize.bench.harness import BenchConfig, peak_rss_mb
from mobilize.bench.stats import BenchStats
from mobilize.core.errors import ConfigError
from mobilize.runtimes.base import open_session, session_class
from mobilize.sources.models import resolve_model

from .config import IMAGENET_MEAN, IMAGENET_STD, OutputLayout
from .converter import FrameConverter
from .frames import FrameSpec, frame_config_for, load_frames

STAGES = ("convert", "feed", "infer", "answer")
TOP_K = 5


def normalization(target: Any) -> tuple[tuple, tuple, str]:
    """(mean, std, where from): a manifest's ``input_normalization`` {mean, std}, else ImageNet's, the
    transform every mobilize data source applies (and the zoo models were trained with)."""
    path = getattr(target, "path", None)
    manifest = Path(str(path) + ".manifest.json") if path is not None else None
    if manifest is not None and manifest.is_file():
        norm = json.loads(manifest.read_text()).get("input_normalization")
        if norm:
            return tuple(norm["mean"]), tuple(norm["std"]), f"manifest {manifest.name}"
    return IMAGENET_MEAN, IMAGENET_STD, "ImageNet mean/std (mobilize's data transform)"


def _pointers(native: Any) -> list[int]:
    """Data addresses of the arrays/tensors a runtime's prepared input holds."""
    if isinstance(native, dict):
        native = list(native.values())
    if isinstance(native, (list, tuple)):
        return [p for item in native for p in _pointers(item)]
    if hasattr(native, "data_ptr"):
        return [native.data_ptr()]
    if isinstance(native, np.ndarray):
        return [native.__array_interface__["data"][0]]
    return []


def top_k(outputs: list, k: int = TOP_K) -> list[tuple[int, float]]:
    """(class, score) of the k largest entries of the first output; ties go to the lower class, as in
    the native loop (an int8 model's scores tie often)."""
    import torch

    scores = outputs[0].reshape(-1).float()
    values, indices = torch.sort(scores, descending=True, stable=True)
    k = min(k, scores.numel())
    return [(int(i), float(v)) for i, v in zip(indices[:k], values[:k])]


def bench_frames(reference: str, config: BenchConfig = BenchConfig(), *, spec: FrameSpec, source: str | None = None,
                 resize: str = "nearest", echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Time frame -> input -> inference -> top-k; the report of ``mobilize.api.bench`` with a ``frames`` block."""
    from mobilize.core.checks import check_at_least, check_threads, default_threads

    check_threads(config.threads)
    check_at_least(config.iterations, 1, "--iter")
    check_at_least(config.warmup, 0, "--warmup")
    if config.no_inputs or config.bundled_input is not None or config.data is not None or config.io_binding:
        raise ConfigError("--frames makes the model's input from camera frames",
                          hint="leave out --no_inputs, --use_bundled_input, --data and --io-binding")
    threads = config.threads or default_threads()
    target = resolve_model(reference, trust_pickle=config.trust_pickle, bound_args=config.bound_args)
    cls = session_class(target, config.runtime)
    cls.check_available()
    cls.import_backend()
    t0 = time.perf_counter_ns()
    session = open_session(target, config.runtime, threads)
    load_ms = (time.perf_counter_ns() - t0) / 1e6
    try:
        specs = list(config.input_specs) or session.declared_input_specs() or list(target.input_specs)
        if len(specs) != 1:
            raise ConfigError(f"--frames feeds one image input; the model takes {len(specs)}",
                              hint="give --input_dims 1,3,H,W if the file does not say")
        mean, std, norm_source = normalization(target)
        cfg = frame_config_for(spec, specs[0], resize, mean, std)
        frames, frame_source = load_frames(cfg, source)
        result = _loop(session, cfg, frames, config, echo)
        details = session.details()
    finally:
        session.close()
    from mobilize.core.artifact import artifact_size_bytes
    from mobilize.sources.models import module_size_bytes

    path = getattr(target, "path", None)
    notes = list(getattr(target, "notes", [])) + session.notes
    if not result["feed_shares_buffer"]:
        notes.append(f"the {session.name} runtime copies the converter's buffer before running (feed stage); "
                     f"its input is {specs[0]}")
    total, outputs = result.pop("total"), result.pop("outputs")
    from mobilize.report.bench_report import BenchReport

    first_run_ms = result.pop("first_run_ms")
    return BenchReport(
        model=str(reference), format=str(target.format), runtime=session.name, threads=threads,
        warmup=config.warmup, iterations=config.iterations,
        size_bytes=(artifact_size_bytes(path, target.format) if path is not None else module_size_bytes(target.module)),
        input_source=f"frames {spec} ({frame_source})", input_specs=[specs[0].to_json()], notes=notes, stats=total,
        load_ms=load_ms, first_run_ms=first_run_ms, peak_rss_mb=peak_rss_mb(), details=details, outputs=outputs,
        sections={"frames": {"spec": str(spec), "source": frame_source, "frame_config": cfg.to_dict(),
                             "normalization": norm_source, **result}},
    ).to_result()


def _loop(session, cfg, frames: list, config: BenchConfig, echo) -> dict[str, Any]:
    import torch

    conv = FrameConverter(cfg)
    buffer = conv.new_output()
    tensor = torch.from_numpy(buffer)
    if cfg.output_layout is OutputLayout.NHWC:
        tensor = tensor.permute(0, 3, 1, 2)  # the model's logical NCHW over the NHWC memory: a view
    echo("Starting benchmark.")
    t0 = time.perf_counter_ns()
    conv(frames[0], out=buffer)
    native = session.prepare([tensor])
    outputs = session.outputs_to_torch(session.checked_run(native, [tensor]))
    first_answer = top_k(outputs)
    first_run_ms = (time.perf_counter_ns() - t0) / 1e6
    low, high = buffer.__array_interface__["data"][0], buffer.__array_interface__["data"][0] + buffer.nbytes
    shares = bool(_pointers(native)) and all(low <= p < high for p in _pointers(native))
    clock, count = time.perf_counter_ns, len(frames)
    prepare, run, to_torch = session.prepare, session.run_prepared, session.outputs_to_torch
    inputs = [tensor]

    def one(i: int, stamps: np.ndarray) -> list:
        a = clock()
        conv(frames[i % count], out=buffer)
        b = clock()
        prepared = prepare(inputs)
        c = clock()
        raw = run(prepared)
        d = clock()
        answer = top_k(to_torch(raw))
        stamps[:] = (b - a, c - b, d - c, clock() - d)
        return answer

    echo("Running warmup runs.")
    scratch = np.zeros(4, np.int64)
    for i in range(config.warmup):
        one(i, scratch)
    echo("Main runs.")
    times = np.zeros((config.iterations, 4), np.int64)
    start = clock()
    for i in range(config.iterations):
        answer = one(i, times[i])
    loop_ns = clock() - start
    totals = times.sum(axis=1)
    total = BenchStats.from_times_ns(totals.tolist(), loop_ns)
    echo(f"Main run finished. Microseconds per iter: {total.us_per_iter:.3f}. "
         f"Iters per second: {total.iters_per_s:.3f}")
    stages = {}
    for s, name in enumerate(STAGES):
        stats = BenchStats.from_times_ns(times[:, s].tolist(), int(times[:, s].sum()))
        stages[name] = {"latency_ms_p50": stats.latency_ms_p50, "latency_ms_mean": stats.latency_ms_mean,
                        "latency_ms_p90": stats.latency_ms_p90, "share_pct": 100.0 * times[:, s].sum() / totals.sum()}
    return {"total": total, "first_run_ms": first_run_ms, "stages": stages, "feed_shares_buffer": shares,
            "output_layout": str(cfg.output_layout), "output_dtype": str(cfg.output_dtype),
            "resize": str(cfg.resize), "first_frame_top_k": first_answer, "last_frame_top_k": answer,
            "outputs": outputs}


def format_stages(report: dict[str, Any]) -> str:
    """The per-stage table under the statistics block."""
    f = report["frames"]
    lines = [f"Frame to answer: {f['spec']} -> {f['frame_config']['output_size']} {f['output_layout']} "
             f"{f['output_dtype']} ({f['resize']}); normalization {f['normalization']}",
             "  stage      p50 ms   mean ms   share"]
    for name, s in f["stages"].items():
        lines.append(f"  {name:<8} {s['latency_ms_p50']:8.3f}  {s['latency_ms_mean']:8.3f}  {s['share_pct']:5.1f}%")
    if "feed" not in f["stages"]:
        lines.append("  the converter writes the program's input tensor in place (native: no feed stage)")
    else:
        lines.append(f"  feed {'reads the converter buffer (no copy, no transpose)' if f['feed_shares_buffer'] else 'copies'}")
    top = ", ".join(f"{c} ({v:.3f})" for c, v in f["first_frame_top_k"])
    lines.append(f"  top-{len(f['first_frame_top_k'])} of the first frame: {top}")
    return "\n".join(lines)
