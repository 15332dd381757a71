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

import time
from typing import Any, Callable

import numpy as np


from mobilize.bench.harness import BenchConfig, peak_rss_mb
from mobilize.bench.stats import BenchStats
from mobilize.core.errors import ConfigError
from mobilize.runtimes.base import open_session, session_class
from mobilize.sources.models import resolve_model

from .frames import FrameSpec, frame_config_for, load_frames, normalization
from .loop import INFER, STAGES, TOP_K, FrameLoop, top_k

__all__ = ["STAGES", "TOP_K", "bench_frames", "format_stages", "normalization", "top_k"]


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


FRAME_ROUNDS = 5
"""``bench --frames`` splits its frames into this many rounds, each followed by the file alone and the control, so
the infer check pairs them round by round (:func:`mobilize.camera.figures.infer_check`)."""


def _loop(session, cfg, frames: list, config: BenchConfig, echo) -> dict[str, Any]:
    import statistics

    from .figures import infer_check

    loop = FrameLoop(session, cfg, frames)
    echo("Starting benchmark.")
    echo("Running warmup runs.")
    loop.round(0, config.warmup)
    own = loop.own_input()
    echo("Main runs.")
    rounds = max(1, min(FRAME_ROUNDS, config.iterations))
    sizes = [config.iterations // rounds + (i < config.iterations % rounds) for i in range(rounds)]
    parts, infer, alone, control = [], [], [], []
    for n in sizes:
        got = loop.round(n)
        parts.append(got)
        infer.append(statistics.median(got.stage_ns[:, INFER]) / 1e6)
        alone.append(statistics.median(loop.alone_round(max(5, n // 2), own)) / 1e6)
        control.append(statistics.median(loop.gap_round(max(5, n // 2), own)) / 1e6)
    times = np.concatenate([p.stage_ns for p in parts])
    totals = times.sum(axis=1)
    total = BenchStats.from_times_ns(totals.tolist(), sum(p.loop_ns for p in parts))
    echo(f"Main run finished. Microseconds per iter: {total.us_per_iter:.3f}. "
         f"Iters per second: {total.iters_per_s:.3f}")
    stages = {}
    for s, name in enumerate(STAGES):
        stats = BenchStats.from_times_ns(times[:, s].tolist(), int(times[:, s].sum()))
        stages[name] = {"latency_ms_p50": stats.latency_ms_p50, "latency_ms_mean": stats.latency_ms_mean,
                        "latency_ms_p90": stats.latency_ms_p90, "share_pct": 100.0 * times[:, s].sum() / totals.sum()}
    outputs = session.outputs_to_torch(session.run_prepared(session.prepare(loop.inputs)))
    return {"total": total, "first_run_ms": loop.first_run_ms, "stages": stages,
            "feed_shares_buffer": loop.feed_shares_buffer, "output_layout": str(cfg.output_layout),
            "output_dtype": str(cfg.output_dtype), "resize": str(cfg.resize), "first_frame_top_k": loop.first_answer,
            "last_frame_top_k": parts[-1].answer, "outputs": outputs,
            "infer_check": infer_check(infer, alone, control)}


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
    check = f.get("infer_check")
    if check and check.get("ratio") is not None:
        lines.append(f"  infer inside the loop {check['infer_ms_p50']:.3f} ms vs the file alone {check['alone_ms_p50']:.3f} "
                     f"ms, paired over {check['rounds']} rounds: {check['ratio']:.2f}x [rule {check['rule']}]")
        if not check["within"]:
            lines.append(f"  note: {check['reason']}")
    top = ", ".join(f"{c} ({v:.3f})" for c, v in f["first_frame_top_k"])
    lines.append(f"  top-{len(f['first_frame_top_k'])} of the first frame: {top}")
    return "\n".join(lines)
