"""``mobilize bench FILE.pte --native --frames nv21:1920x1080``: the frame-to-answer loop of
``bench --frames``, timed inside the native benchmark of a runner that has ``frames`` (ExecuTorch's
``bench_executorch --frame_config``): the C++ converter (``native/cpp/camera_convert.h``) writes the
program's input tensor in place, in the dim order the program declares, then forward, then top-5; the
same report as the Python loop, with no ``feed`` stage (there is nothing between the converter and the
runtime to time).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

from mobilize.bench.harness import BenchConfig
from mobilize.bench.stats import BenchStats
from mobilize.camera.bench import normalization
from mobilize.camera.frames import FrameSpec, frame_config_for, load_frames, native_config
from mobilize.core.errors import ConfigError, InternalError

STAGES = ("convert", "infer", "answer")


def bench_native_frames(reference: str, config: BenchConfig = BenchConfig(), *, spec: FrameSpec,
                        source: str | None = None, resize: str = "nearest",
                        echo: Callable[[str], None] = print) -> dict[str, Any]:
    from mobilize.core.checks import default_threads
    from mobilize.native.build import ensure_binary
    from mobilize.native.runner import declared_input_specs, native_target, run_binary
    from mobilize.report.bench_report import BenchReport

    if config.no_inputs or config.bundled_input is not None or config.data is not None or config.io_binding:
        raise ConfigError("--frames makes the model's input from camera frames",
                          hint="leave out --no_inputs, --use_bundled_input, --data and --io-binding")
    if config.iterations < 1:
        raise ConfigError(f"--iter must be at least 1, got {config.iterations}")
    target, runtime_name, runner = native_target(reference, config.runtime, config.trust_pickle)
    if not runner.frames:
        raise ConfigError(f"--native --frames runs ExecuTorch files (.pte, .bpte); '{reference}' is {target.format}",
                          hint="leave out --native to time the frame loop in Python")
    binary = ensure_binary(runner, echo=lambda line: echo(f"note: {line}"))
    threads = config.threads or default_threads()
    specs = (list(config.input_specs)
             or (declared_input_specs(binary, target.path) if runner.reads_declared_inputs else None)
             or list(target.input_specs))
    if len(specs) != 1:
        raise ConfigError(f"--frames feeds one image input; the model takes {len(specs)}")
    mean, std, norm_source = normalization(target)
    cfg = frame_config_for(spec, specs[0], resize, mean, std)
    frames, frame_source = load_frames(cfg, source)
    with tempfile.TemporaryDirectory(prefix="mobilize-frames-") as tmp:
        frame_file = Path(tmp) / f"frames.{cfg.layout.value}"
        with open(frame_file, "wb") as fh:
            for frame in frames:
                fh.write(frame.tobytes())
        run = run_binary(binary, target.path, ["--frame_config", native_config(cfg), "--frame_file", str(frame_file)],
                         threads, config, Path(tmp), echo)
    stages, top, layout = _frame_lines(run.machine)
    total = BenchStats.from_times_ns(run.times_ns, run.loop_ns)
    return BenchReport(
        model=str(reference), format=str(target.format), runtime=runtime_name, runner="native", threads=run.threads,
        warmup=config.warmup, iterations=config.iterations, size_bytes=target.path.stat().st_size,
        input_source=f"frames {spec} ({frame_source})", input_specs=[specs[0].to_json()],
        notes=list(getattr(target, "notes", [])), stats=total, load_ms=run.load_ns / 1e6,
        first_run_ms=run.first_run_ns / 1e6, peak_rss_mb=run.peak_rss_kb / 1024.0, outputs=run.outputs,
        sections={"native": {"binary": str(binary)},
                  "frames": {"spec": str(spec), "source": frame_source, "frame_config": cfg.to_dict(),
                             "normalization": norm_source, "stages": stages, "feed_shares_buffer": True,
                             "output_layout": layout.get("layout", str(cfg.output_layout)),
                             "output_dtype": layout.get("dtype", str(cfg.output_dtype)), "resize": str(cfg.resize),
                             "first_frame_top_k": top}},
    ).to_result()


def _frame_lines(machine: list[str]) -> tuple[dict[str, dict[str, float]], list[tuple[int, float]], dict[str, str]]:
    """What the frame loop printed (``#mobilize stage_ns|first_top_k|frame_input``): each stage's statistics
    and share of the loop, the first frame's top-k and the input layout the converter wrote."""
    stage_ns, top, layout = {}, [], {}
    for line in machine:
        kind, _, rest = line.partition(" ")
        if kind == "stage_ns":
            name, *values = rest.split()
            stage_ns[name] = [int(v) for v in values]
        elif kind == "first_top_k":
            top = [(int(c), float(v)) for c, v in (item.split(":") for item in rest.split())]
        elif kind == "frame_input":
            layout = dict(item.split("=", 1) for item in rest.split())
    if set(stage_ns) != set(STAGES) or not top:
        raise InternalError("the native frame benchmark printed no stage timings")
    sums = {name: sum(values) for name, values in stage_ns.items()}
    stages = {}
    for name in STAGES:
        s = BenchStats.from_times_ns(stage_ns[name], sums[name])
        stages[name] = {"latency_ms_p50": s.latency_ms_p50, "latency_ms_mean": s.latency_ms_mean,
                        "latency_ms_p90": s.latency_ms_p90, "share_pct": 100.0 * sums[name] / sum(sums.values())}
    return stages, top, layout
