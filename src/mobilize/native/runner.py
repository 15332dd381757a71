"""``mobilize bench --native FILE``: time an artifact in a C++ process with no Python in it.

The benchmark binary of the engine that owns the file's format (its ``NativeRunner``: LibTorch
for ``.pt``/``.ptl``, ExecuTorch with XNNPACK for ``.pte``/``.bpte``) is built once
(``mobilize.native.build``), run with speed_benchmark_torch's flags, and its lines parsed into the
same report the Python harness returns, plus ``runner: native``.  Inputs are chosen exactly as the
Python harness chooses them (seeded random, ``--data`` sample, ``--input_dims``) and handed over in a
tensor file, so both runners see the same numbers; bundled inputs are read by the C++ runtime itself.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

from mobilize.bench.harness import BenchConfig
from mobilize.bench.stats import BenchStats
from mobilize.core.backend import default_runtime
from mobilize.core.errors import ConfigError, UserError
from mobilize.core.inputs import InputSpec, MemoryFormat, input_type_name, make_random_inputs
from mobilize.core.native_runner import NativeRunner
from mobilize.core.text import a

NATIVE_NOISE = ("cpuinfo_utils.cpp", "threadpool.cpp", "Failed to load /", "KernelPreference")
"""ExecuTorch's informational log lines (cpuinfo probing, threadpool resets), dropped from stderr."""
PREFIX = "#mobilize "
ET_ERROR_LOG = re.compile(r"^E [0-9:.]+ executorch:[^\]]*\] (.*)$")
"""An error ExecuTorch logged (``E 00:00:00.005 executorch:tensor_impl.cpp:135] Attempted to resize ...``)."""


@dataclasses.dataclass
class NativeRun:
    """What one run of a native benchmark printed, parsed."""

    times_ns: list[int]
    loop_ns: int
    load_ns: int
    first_run_ns: int
    peak_rss_kb: int
    loop_minor_faults: int
    """Page faults during the timed loop (memory the allocator returned to the OS and touched again)."""
    threads: int
    inputs: list[InputSpec]
    backends: list[str]
    outputs: list
    lines: list[str]
    """The human lines (speed_benchmark_torch's), in order."""
    machine: list[str] = dataclasses.field(default_factory=list)
    """Every ``#mobilize`` line, prefix stripped (what a mode of its own, like ``--frame_config``, adds)."""


def native_target(reference: str, runtime: str | None = None, trust_pickle: bool = False
                  ) -> tuple[Any, str, NativeRunner]:
    """Resolve ``reference`` to an artifact file a native program can run, its Python runtime's name (the
    report's ``runtime``: the one whose C++ core the program runs) and the engine's runner."""
    from mobilize.native.build import runner_for_format
    from mobilize.sources.models import resolve_model

    target = resolve_model(reference, trust_pickle=trust_pickle)
    fmt = getattr(target, "format", None)
    runner = runner_for_format(fmt) if fmt else None
    if getattr(target, "path", None) is None or runner is None:
        raise ConfigError(f"--native runs TorchScript (.pt), lite (.ptl) and ExecuTorch (.pte, .bpte) files; "
                          f"'{reference}' is {'a ' + str(fmt) + ' file' if fmt else 'not a model file'}",
                          hint="export one first, e.g. mobilize optimize MODEL --recipe executorch-fp32 -o out/")
    name = runtime or default_runtime(fmt)
    if name not in runner.runtime_args:
        raise ConfigError(f"--native cannot run {a(str(fmt))} file with runtime '{name}'",
                          hint=f"leave --runtime out (it runs {default_runtime(fmt)})")
    return target, name, runner


def bench_native(reference: str, config: BenchConfig = BenchConfig(), *,
                 echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Benchmark an artifact with its native program as ``config`` says; the same report as ``mobilize.api.bench``."""
    runtime, threads, no_inputs, bundled_input = config.runtime, config.threads, config.no_inputs, config.bundled_input
    input_specs = list(config.input_specs) or None
    data, seed, trust_pickle, io_binding = config.data, config.seed, config.trust_pickle, config.io_binding
    from mobilize.core.checks import default_threads
    from mobilize.native.build import ensure_binary
    from mobilize.report.bench_report import BenchReport

    if io_binding:
        raise ConfigError("--io-binding is an ONNX Runtime option", hint="--native runs .pt, .ptl, .pte and .bpte files")
    if config.iterations < 1:
        raise ConfigError(f"--iter must be at least 1, got {config.iterations}")
    target, runtime_name, runner = native_target(reference, runtime, trust_pickle)
    binary = ensure_binary(runner, echo=lambda line: print(f"note: {line}", file=sys.stderr))
    threads = threads or default_threads()
    with tempfile.TemporaryDirectory(prefix="mobilize-native-") as tmp:
        args, source, specs = input_args(binary, target, runner, Path(tmp), input_specs, no_inputs, bundled_input,
                                          data, seed)
        args += runner.runtime_args[runtime_name]
        run = run_binary(binary, target.path, args, threads, config, Path(tmp), echo)
    notes = list(getattr(target, "notes", []))
    details = runner.details(target, notes, run.backends) if runner.details else {}
    stats = BenchStats.from_times_ns(run.times_ns, run.loop_ns)
    return BenchReport(
        model=str(reference), format=str(target.format), runtime=runtime_name, runner="native", threads=run.threads,
        warmup=config.warmup, iterations=config.iterations, size_bytes=target.path.stat().st_size,
        input_source=source, input_specs=[s.to_json() for s in (specs or run.inputs)], notes=notes, stats=stats,
        load_ms=run.load_ns / 1e6, first_run_ms=run.first_run_ns / 1e6, peak_rss_mb=run.peak_rss_kb / 1024.0,
        details=details, outputs=run.outputs,
        sections={"native": {"binary": str(binary), "registered_backends": run.backends,
                             "minor_page_faults_per_iter": run.loop_minor_faults / config.iterations}},
    ).to_result()


def input_args(binary: Path, target, runner: NativeRunner, tmp: Path, input_specs, no_inputs: bool,
               bundled_input: int | None, data: str | None, seed: int, prefix: Sequence[str] = ()
               ) -> tuple[list[str], str, list[InputSpec]]:
    """The binary's input flags, the report's ``input_source`` and the input specs, chosen as the
    Python harness chooses them (mobilize.api.bench); ``prefix`` starts the binary (run_binary's)."""
    if no_inputs:
        return ["--no_inputs"], "none", []
    if bundled_input is not None:
        if bundled_input < 0:
            raise ConfigError(f"--use_bundled_input must be 0 or more, got {bundled_input}")
        return ["--use_bundled_input", str(bundled_input)], f"bundled:{bundled_input}", []
    declared = declared_input_specs(binary, target.path, prefix) if runner.reads_declared_inputs else None
    if data is not None:
        from mobilize.sources.data import open_data

        specs = list(input_specs or declared or target.input_specs)
        if len(specs) != 1 or any(d <= 0 for d in specs[0].shape):
            raise ConfigError("--data feeds one input of known shape", hint='give --input_dims, e.g. "1,3,224,224"')
        x, _ = next(iter(open_data(data).batches(specs[0], limit=specs[0].shape[0])))
        inputs, source = [x], f"data:{data}"
    else:
        specs = list(input_specs or declared or target.input_specs)
        if not specs or any(d <= 0 for s in specs for d in s.shape):
            raise ConfigError(f"cannot tell the input shape of {target.path}",
                              hint='give --input_dims, e.g. --input_dims "1,3,224,224"')
        inputs, source = make_random_inputs(specs, seed), f"random-with-seed:{seed}"
    from mobilize.native.tensorfile import write_tensors

    write_tensors(tmp / "inputs.mbt", inputs)
    args = ["--input_file", str(tmp / "inputs.mbt")]
    if any(s.memory_format == MemoryFormat.CHANNELS_LAST for s in specs):
        args += ["--input_memory_format", "channels_last"]
    return args, source, specs


def declared_input_specs(binary: Path, path: Path, prefix: Sequence[str] = ()) -> list[InputSpec] | None:
    """What a program declares for its inputs, asked of the native runtime itself (a runner that
    ``reads_declared_inputs``)."""
    done = subprocess.run([*prefix, str(binary), "--model", str(path), "--describe_inputs"], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise UserError(f"the native ExecuTorch runtime could not load {path}: {_error_line(done.stderr)}", stage="load")
    specs = []
    for line in done.stdout.splitlines():
        if not line.startswith(PREFIX + "declared "):
            continue
        fields = dict(f.split("=", 1) for f in line.split()[3:] if "=" in f)
        if "shape" not in fields:
            return None
        shape = tuple(int(d) for d in fields["shape"].split(",") if d)
        order = tuple(int(d) for d in fields.get("dim_order", "").split(",") if d)
        fmt = MemoryFormat.CHANNELS_LAST if order == (0, 2, 3, 1) else MemoryFormat.CONTIGUOUS
        specs.append(InputSpec(shape, input_type_name(fields["dtype"]), fmt))
    return specs


def run_binary(binary: Path, model: Path, args: list[str], threads: int, config: BenchConfig, tmp: Path,
               echo: Callable[[str], None] = print, prefix: Sequence[str] = ()) -> NativeRun:
    """Run a native benchmark, echo speed_benchmark_torch's lines as they come, parse the rest.  ``prefix`` is
    the command that starts it elsewhere (the arm64 root under QEMU: mobilize.arm64.native)."""
    from mobilize.native.tensorfile import read_tensors

    out_file = tmp / "outputs.mbt"
    cmd = [*prefix, str(binary), "--model", str(model), "--warmup", str(config.warmup), "--iter", str(config.iterations),
           "--pthreadpool_size", str(threads), "--output_file", str(out_file), *args]
    if config.report_pep:
        cmd.append("--report_pep")
    machine: list[str] = []
    lines: list[str] = []
    with tempfile.TemporaryFile(mode="w+") as err, \
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith(PREFIX):
                machine.append(line[len(PREFIX):])
            else:
                lines.append(line)
                echo(line)
        code = proc.wait()
        err.seek(0)
        stderr = err.read()
    if code == 2:  # the program's own "bad flag or input choice"
        raise ConfigError(f"native benchmark of {model}: {_error_line(stderr)}")
    if code != 0:
        raise UserError(f"the native runtime failed on {model}: {_error_line(stderr)}",
                        hint="check --input_dims / --input_type against what the model expects", stage="run")
    return _parse(machine, lines, read_tensors(out_file))


def _error_line(stderr: str) -> str:
    """The program's ``error:`` line, with the first error ExecuTorch logged before it (the cause)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not any(n in ln for n in NATIVE_NOISE)]
    errors = [ln for ln in lines if ln.startswith("error:")]
    causes = [m.group(1) for m in map(ET_ERROR_LOG.match, lines) if m]
    if errors:
        return errors[-1][len("error:"):].strip() + (f" ({causes[0]})" if causes else "")
    return lines[-1] if lines else "it exited without a message"


def _parse(machine: list[str], lines: list[str], outputs: list) -> NativeRun:
    from mobilize.core.errors import InternalError

    summary: dict[str, str] = {}
    times: list[int] = []
    inputs: list[InputSpec] = []
    backends: list[str] = []
    for line in machine:
        kind, _, rest = line.partition(" ")
        if kind == "times_ns":
            times = [int(t) for t in rest.split()]
        elif kind == "input":
            fields = dict(f.split("=", 1) for f in rest.split()[1:])
            inputs.append(InputSpec(tuple(int(d) for d in fields["shape"].split(",") if d),
                                    input_type_name(fields["dtype"])))
        elif kind == "backends":
            backends = [b for b in rest.split(",") if b]
        elif "=" in kind:
            summary.update(f.split("=", 1) for f in line.split())
    if not times or "loop_ns" not in summary:
        raise InternalError("the native benchmark printed no timings")
    return NativeRun(times, int(summary["loop_ns"]), int(summary["load_ns"]), int(summary["first_run_ns"]),
                     int(summary["peak_rss_kb"]), int(summary["loop_minor_faults"]), int(summary["threads"]), inputs,
                     backends, outputs, lines, machine)
