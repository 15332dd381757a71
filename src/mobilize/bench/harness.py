"""Time any Session the same way: warm-up in process, then N individually timed iterations.
"""

from __future__ import annotations

import dataclasses
import resource
import time
from typing import Any, Callable, Sequence

from mobilize.bench.stats import BenchStats


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """Everything one benchmark run takes (the CLI's ``mobilize bench`` flags, one field each)."""

    warmup: int = 10
    """Untimed runs before the timed ones, in the same process."""
    iterations: int = 100
    report_pep: bool = False
    """Print one ``PyTorchObserver`` latency line per iteration, as speed_benchmark_torch does."""
    runtime: str | None = None
    """Runtime name (None: the default for the file's format)."""
    threads: int | None = None
    """Intra-op threads (None: all cores)."""
    input_specs: tuple = ()
    """Input shapes and types (``--input_dims``/``--input_type``); empty: what the model declares."""
    no_inputs: bool = False
    bundled_input: int | None = None
    """Use the N-th input bundled in the file."""
    data: str | None = None
    """Take the input from a data source instead of random numbers."""
    seed: int = 0
    """Seed of random inputs."""
    trust_pickle: bool = False
    io_binding: bool = False
    """ONNX Runtime only: bind inputs once and write outputs into preallocated buffers."""
    bound_args: dict = dataclasses.field(default_factory=dict)
    """Non-tensor forward arguments bound by name (``--input sr=16000``)."""


@dataclasses.dataclass
class BenchResult:
    stats: BenchStats
    first_run_ms: float
    peak_rss_mb: float
    outputs: list


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started its program (Linux ``VmHWM``).  ``ru_maxrss`` also
    counts the image it was forked from before exec: every compare worker read at least its parent's ~350 MB."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


ROUND_WARMUP_RUNS = 3
ROUND_WARMUP_S = 0.05
"""Untimed runs before every interleaved round: at least this many runs and this long.  Measured on a 2-core AMD
EPYC VM (the default model's files, per-run times right after another runtime's round): every runtime needs
10-20 runs (5-10 ms) to reach its steady speed, XNNPACK's the longest (first run 2x its steady time), and after
300 ms idle even 25 ms was not enough.  With 3 warm-up runs and 10 timed, compare read LiteRT 1.75x slower than
a bare loop and recommended a file 1.34x slower than the fastest; with 50 ms, both agree."""


def warm_up(fn: Callable[[Any], Any], native: Any, runs: int = ROUND_WARMUP_RUNS,
            seconds: float = ROUND_WARMUP_S) -> int:
    """Run ``fn(native)`` untimed until both ``runs`` runs and ``seconds`` have passed; returns the runs made."""
    end = time.perf_counter() + seconds
    done = 0
    while done < runs or time.perf_counter() < end:
        fn(native)
        done += 1
    return done


def warm_round(fn: Callable[[Any], Any], native: Any, iterations: int, runs: int = ROUND_WARMUP_RUNS,
               seconds: float = ROUND_WARMUP_S) -> tuple[list[int], int]:
    """One interleaved round: :func:`warm_up`, then :func:`timed_loop`."""
    warm_up(fn, native, runs, seconds)
    return timed_loop(fn, native, iterations)


def timed_loop(fn: Callable[[Any], Any], native: Any, iterations: int) -> tuple[list[int], int]:
    """Per-iteration times (ns) and the wall time of the whole loop (ns).

    The times grow as the loop runs, in one flat buffer: a list made up front for every iteration (8 GB for
    ``--iter 1000000000``) was one long allocation during which a SIGTERM waited (past 60 s on a loaded
    machine), and seconds of freeing after it."""
    import array

    clock = time.perf_counter_ns
    times = array.array("q")
    record = times.append
    start = clock()
    for _ in range(iterations):
        t0 = clock()
        fn(native)
        record(clock() - t0)
    return times.tolist(), clock() - start


def benchmark(session: Any, inputs: Sequence[Any], config: BenchConfig = BenchConfig(),
              echo: Callable[[str], None] = print) -> BenchResult:
    if config.iterations < 1:
        from mobilize.core.errors import ConfigError

        raise ConfigError(f"--iter must be at least 1, got {config.iterations}")
    echo("Starting benchmark.")
    native = session.prepare(inputs)
    t0 = time.perf_counter_ns()
    raw = session.checked_run(native, inputs)
    first_run_ms = (time.perf_counter_ns() - t0) / 1e6
    echo("Running warmup runs.")
    for _ in range(config.warmup):
        session.run_prepared(native)
    echo("Main runs.")
    times, total = timed_loop(session.run_prepared, native, config.iterations)
    stats = BenchStats.from_times_ns(times, total)
    echo(f"Main run finished. Microseconds per iter: {stats.us_per_iter:.3f}. "
         f"Iters per second: {stats.iters_per_s:.3f}")
    if config.report_pep:
        for t in times:
            echo(f'PyTorchObserver {{"type": "NET", "unit": "us", "metric": "latency", "value": "{t / 1e3:.3f}"}}')
    return BenchResult(stats, first_run_ms, peak_rss_mb(), session.outputs_to_torch(raw))
