"""Native programs cross-compiled for aarch64 (``mobilize.native.cross``), run inside the arm64 root under QEMU.

``mobilize bench FILE --native --on arm64`` runs the aarch64 build of the native benchmark on the file and
prints the same speed_benchmark lines as on the host, the summary line labelled as emulated;
``mobilize optimize MODEL --emit-app DIR --target arm64`` builds each emitted app for aarch64 and runs it
once, printing its top-5 and its summary line, labelled the same way.  Emulated times are never latency:
the report keeps them under ``arm64`` as ``*_not_latency``.

Each run enters a private mount namespace with an overlay of the root (writes go to a tmpfs, the cached
root stays as built), the emulated CPU's /proc/cpuinfo and /sys (``describe_cpu``), and the folders it
needs bind-mounted at their own paths, so the host's paths (the model, the app's model_info.h) hold inside.

    $ mobilize bench model.pte --native --on arm64 --iter 5
    ...
    Main run finished. Microseconds per iter: 9342.118. Iters per second: 107.042  [emulated: QEMU cortex-a76 ...]
"""

from __future__ import annotations

import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from mobilize.arm64.run import CPU_MODELS, DEFAULT_CPU, describe_cpu, root_dir
from mobilize.core.errors import ConfigError, InternalError, UserError
from mobilize.core.native_runner import NativeRunner


def library_path() -> str:
    """Where the root's aarch64 wheels keep the runtimes' shared libraries (every native runner's package)."""
    from mobilize.native.build import runners
    from mobilize.native.cross import SITE

    return ":".join(f"/{SITE / runner.package / 'lib'}" for runner in runners().values())


def label(cpu: str) -> str:
    return f"[emulated: QEMU {cpu} on {platform.machine()}, not latency]"


def enter_root(work: Path, cpu: str, binds: Sequence[tuple[Path, bool]]) -> list[str]:
    """The command prefix that runs a program inside the arm64 root: ``work`` (a fresh host folder) holds the
    emulated CPU's files, the overlay's tmpfs and ``machine`` (``uname -m`` inside); ``binds`` are
    (folder, writable) mounted at their own paths.  Nothing is left mounted or written in the cached root."""
    rootfs = root_dir() / "rootfs"
    describe_cpu(work / "cpu", cpu)
    (work / "mnt").mkdir()
    q = shlex.quote
    m = f"{q(str(work / 'mnt'))}/root"
    lines = [f"set -e; mount -t tmpfs mobilize {q(str(work / 'mnt'))}",
             f"mkdir {q(str(work / 'mnt'))}/upper {q(str(work / 'mnt'))}/work {m}",
             f"mount -t overlay overlay -o lowerdir={q(str(rootfs))},upperdir={q(str(work / 'mnt'))}/upper,"
             f"workdir={q(str(work / 'mnt'))}/work {m}",
             f"mount -t proc proc {m}/proc", f"mount --bind {q(str(work / 'cpu/cpuinfo'))} {m}/proc/cpuinfo",
             f"mount --bind {q(str(work / 'cpu/sys'))} {m}/sys"]
    for folder, writable in sorted(binds, key=lambda b: len(str(b[0]))):
        inside = m + q(str(folder.resolve()))
        lines += [f"mkdir -p {inside}", f"mount --bind {q(str(folder.resolve()))} {inside}"]
        if not writable:
            lines.append(f"mount -o remount,bind,ro {inside}")
    env = f"/usr/bin/env -i QEMU_CPU={q(cpu)} HOME=/tmp PATH=/usr/bin:/bin LD_LIBRARY_PATH={library_path()}"
    # the machine the program sees: Debian's aarch64 uname, run the same way (QEMU through binfmt_misc)
    lines += [f"chroot {m} {env} /usr/bin/uname -m > {q(str(work / 'machine'))}", f'exec chroot {m} {env} "$@"']
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "; ".join(lines), "sh"]


def _machine(work: Path) -> str:
    path = work / "machine"
    return path.read_text().strip() if path.is_file() else "unknown"


def _check_aarch64(binary: Path) -> int:
    from mobilize.native.cross import EM_AARCH64, elf_machine

    found = elf_machine(binary)
    if found != EM_AARCH64:
        raise InternalError(f"the aarch64 build {binary} is an ELF for machine {found}, not AArch64 ({EM_AARCH64})")
    return found


def _refuse_unsupported(config) -> None:
    """The options an emulated native run cannot honour, refused before anything is built."""
    if config.report_pep:
        raise ConfigError("--report_pep prints latency lines, and an emulated run has no latency",
                          hint="leave out --report_pep with --on arm64")
    if config.io_binding:
        raise ConfigError("--io-binding is an ONNX Runtime option", hint="--native runs .pt, .ptl, .pte and .bpte files")


def bench_native_arm64(reference: str, config=None, *, cpu: str = DEFAULT_CPU,
                       echo: Callable[[str], None] = print) -> dict[str, Any]:
    """``reference`` timed by the aarch64 native benchmark under QEMU; the report of ``bench_native`` with the
    times moved under ``arm64`` as emulated, not latency."""
    from mobilize.arm64 import require_arm64
    from mobilize.bench.harness import BenchConfig
    from mobilize.bench.stats import BenchStats
    from mobilize.core.checks import default_threads
    from mobilize.native.cross import build_binary_aarch64
    from mobilize.native.runner import input_args, native_target, run_binary
    from mobilize.report.bench_report import BenchReport

    config = config or BenchConfig()
    _refuse_unsupported(config)
    require_arm64(cpu)
    # absolute: the program starts in the root's / (the file's folder is mounted at its own path)
    absolute = str(Path(reference).resolve()) if Path(reference).is_file() else reference
    target, runtime_name, runner = native_target(absolute, config.runtime, config.trust_pickle)
    built = build_binary_aarch64(runner, echo=lambda line: print(f"note: {line}", file=sys.stderr))
    elf = _check_aarch64(built.path)
    threads = config.threads or default_threads()
    tag = label(cpu)

    def labelled(line: str) -> None:
        echo(f"{line}  {tag}" if line.startswith("Main run finished.") else line)

    with tempfile.TemporaryDirectory(prefix="mobilize-arm64-native-") as tmp:
        work, run_dir = Path(tmp), Path(tmp) / "run"
        run_dir.mkdir()
        prefix = enter_root(work, cpu, [(run_dir, True), (target.path.resolve().parent, False),
                                        (built.path.parent, False)])
        args, source, specs = input_args(built.path, target, runner, run_dir, list(config.input_specs) or None,
                                         config.no_inputs, config.bundled_input, config.data, config.seed, prefix)
        args += runner.runtime_args[runtime_name]
        t0 = time.perf_counter()
        run = run_binary(built.path, target.path.resolve(), args, threads, config, run_dir, labelled, prefix)
        wall_s = time.perf_counter() - t0
        machine = _machine(work)
    if machine != "aarch64":
        raise InternalError(f"the program in the arm64 root saw machine '{machine}', not aarch64")
    stats = BenchStats.from_times_ns(run.times_ns, run.loop_ns).to_json()
    arm64 = {
        "emulated": True, "machine": machine, "host_machine": platform.machine(), "elf_machine": elf,
        "qemu_cpu": cpu, "cpu_model": CPU_MODELS[cpu], "versions": {built.family: _version(runner)},
        "ms_per_iter_not_latency": {k[len("latency_ms_"):]: v for k, v in stats.items()
                                    if k.startswith("latency_ms_")},
        "load_ms_not_latency": run.load_ns / 1e6, "first_run_ms_not_latency": run.first_run_ns / 1e6,
        "wall_s_not_latency": wall_s, "peak_rss_mb": run.peak_rss_kb / 1024.0}
    return BenchReport(
        model=str(reference), format=str(target.format), runtime=runtime_name, runner="native", on="arm64",
        threads=run.threads, warmup=config.warmup, iterations=config.iterations, size_bytes=target.path.stat().st_size,
        input_source=source, input_specs=[s.to_json() for s in (specs or run.inputs)],
        notes=list(getattr(target, "notes", [])), timed=False, outputs=run.outputs,
        sections={"arm64": arm64, "native": {"binary": str(built.path), "built_s": round(built.build_s, 1),
                                             "cached": built.cached, "registered_backends": run.backends}},
    ).to_result()


def _version(runner: NativeRunner) -> str:
    from mobilize.native.cross import aarch64_package

    return aarch64_package(runner).version


def format_report(r: dict[str, Any]) -> str:
    """The statistics block of an emulated run: the same figures as the host's, none of them called latency."""
    a = r["arm64"]
    t = a["ms_per_iter_not_latency"]
    return "\n".join([
        f"Statistics: {r['model']} ({r['format']}, runtime {r['runtime']}, native aarch64 build, {r['threads']} "
        f"thread(s), {r['iterations']} iterations after {r['warmup']} warm-up, input {r['input_source']})",
        f"  ran on {a['machine']} under QEMU {a['qemu_cpu']} ({a['cpu_model']}) on an {a['host_machine']} host: "
        f"emulated, so these times are not latency",
        f"  emulated ms per iter   p50 {t['p50']:.3f}  p90 {t['p90']:.3f}  min {t['min']:.3f}  max {t['max']:.3f}",
        f"  load {a['load_ms_not_latency']:.1f} ms   first run {a['first_run_ms_not_latency']:.3f} ms (emulated)   "
        f"peak RSS {a['peak_rss_mb']:.1f} MB   size {r['size_bytes'] / 1e6:.2f} MB",
        *[f"  note: {n}" for n in r["notes"]]])


def run_app_arm64(app, *, cpu: str = DEFAULT_CPU, timeout_s: float = 900.0,
                  echo: Callable[[str], None] = print) -> dict[str, Any]:
    """An emitted app (``mobilize.native.app.EmittedApp``) built for aarch64 and run once under QEMU with its
    defaults (model_info.h): its lines echoed, the summary line labelled as emulated."""
    from mobilize.arm64 import require_arm64
    from mobilize.native.build import runner_for_format
    from mobilize.native.cross import build_app_aarch64

    require_arm64(cpu)
    runner = runner_for_format(app.format)
    if runner is None:
        raise InternalError(f"an app was emitted for {app.format}, which no engine runs natively")
    built = build_app_aarch64(app.folder, runner,
                              echo=lambda line: print(f"note: {line}", file=sys.stderr))
    elf = _check_aarch64(built.path)
    tag = label(cpu)
    with tempfile.TemporaryDirectory(prefix="mobilize-arm64-app-") as tmp:
        work = Path(tmp)
        prefix = enter_root(work, cpu, [(app.folder, False), (app.artifact.resolve().parent, False)])
        t0 = time.perf_counter()
        try:
            done = subprocess.run([*prefix, str(built.path)], capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise UserError(f"the aarch64 app in {app.folder}: no answer within {timeout_s:g} s under QEMU") from None
        wall_s = time.perf_counter() - t0
        machine = _machine(work)
    if done.returncode != 0:
        tail = [ln for ln in done.stderr.splitlines() if ln.strip()][-3:]
        raise UserError(f"the aarch64 app in {app.folder} failed under QEMU (exit {done.returncode}): "
                        f"{' | '.join(tail)[:400]}")
    if machine != "aarch64":
        raise InternalError(f"the app in the arm64 root saw machine '{machine}', not aarch64")
    lines = []
    for line in done.stdout.splitlines():
        if line.startswith("latency:"):
            line = "emulated time:" + line[len("latency:"):] + f"  {tag}"
        elif line.startswith("Main run finished."):
            line = f"{line}  {tag}"
        lines.append(line)
        echo(f"  {line}")
    top1 = next((int(ln.split()[1]) for ln in lines if ln.startswith("top-1:")), None)
    return {"folder": str(app.folder), "binary": str(built.path), "elf_machine": elf, "machine": machine,
            "qemu_cpu": cpu, "emulated": True, "build_s": round(built.build_s, 1),
            "wall_s_not_latency": round(wall_s, 2), "top1": top1, "lines": lines}


def apps_on_arm64(apps, *, cpu: str = DEFAULT_CPU, echo: Callable[[str], None] = print
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """``optimize --emit-app DIR --target arm64``: each app built for aarch64 and run once under QEMU; returns the
    runs and notes for the apps that could not be (no arm64 root, a failed build), each saying why."""
    from mobilize.arm64.run import missing
    from mobilize.core.errors import BackendUnavailableError

    why = missing()
    if why:
        return [], [f"emit-app: apps not built for aarch64: {why}"]
    import shlex

    q = lambda path: shlex.quote(str(path))  # noqa: E731 - a folder with spaces or quotes, pasted into a shell
    runs, notes = [], []
    for app in apps:
        echo(f"app {app.folder.name} built for aarch64, run under QEMU {cpu} (its defaults, model_info.h):")
        try:
            runs.append(run_app_arm64(app, cpu=cpu, echo=echo))
        except (BackendUnavailableError, UserError) as exc:
            notes.append(f"emit-app: {app.folder.name} on aarch64: {exc}")
            continue
        with open(app.folder / "README.md", "a") as fh:
            fh.write(f"""
aarch64 (arm64 Linux): `toolchain-aarch64.cmake` cross-builds this app with Debian's g++-aarch64-linux-gnu
against the aarch64 wheels in the arm64 root (`sudo bash scripts/setup-arm64.sh` in mobilize's checkout):

    cmake -S {q(app.folder)} -B {q(app.folder / 'build-aarch64')} -DCMAKE_TOOLCHAIN_FILE={q(app.folder / 'toolchain-aarch64.cmake')}
    cmake --build {q(app.folder / 'build-aarch64')}

On an arm64 board, run `build-aarch64/app` with the wheel's lib/ folder on LD_LIBRARY_PATH; mobilize ran it
under QEMU ({cpu}): emulated, so the time it prints is not latency.
""")
    return runs, notes


__all__ = ["bench_native_arm64", "format_report", "run_app_arm64", "apps_on_arm64", "enter_root"]
