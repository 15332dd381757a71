"""The Ray executor: one Ray task per model, holding its node's single ``mobilize_bench`` slot.

Each model's whole compare (build, calibration, accuracy and every timed round) runs as one task
that asks for ``{"mobilize_bench": 1}``; every node offers exactly one such slot, so a node times
one model at a time and the interleaved rounds stay valid. Models spread over the nodes. A task
whose worker process or node is lost is retried (``max_retries``); a small actor on the driver's
node records every attempt, and the index lists the lost ones. The files a task wrote (report,
logs, artifacts) come back with their SHA-256, which is checked before they are written under
``DIR/<model>/`` (listed in ``DIR/<model>/files.json``).

    $ ray start --head --num-cpus 0                                   # the head only schedules
    $ ray start --address HEAD:6379 --resources '{"mobilize_bench": 1}'   # on every timing node
    $ mobilize sweep --models models.txt --plan quick --executor ray:HEAD:6379 -o out/sweep
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

from mobilize.core.errors import BackendUnavailableError, ConfigError
from mobilize.sweep.jobs import ModelEntry, ModelJob, ModelStatus

BENCH_RESOURCE = "mobilize_bench"
"""The custom resource every timing node offers exactly once."""


def _ray():
    try:
        import ray
    except ImportError:
        raise BackendUnavailableError("the ray executor needs Ray", hint='pip install "ray[default]==2.60.0"') from None
    return ray


@functools.cache
def _remote():
    """Ray's remote classes and functions, defined on first use (Ray is an optional dependency)."""
    ray = _ray()

    @ray.remote(num_cpus=0)
    class Attempts:
        """Every start of every model's task: which node and process it ran in."""

        def __init__(self):
            self.log: dict[str, list[dict[str, Any]]] = {}

        def start(self, stem: str, node_id: str, host: str, pid: int) -> int:
            self.log.setdefault(stem, []).append({"node_id": node_id, "host": host, "pid": pid})
            return len(self.log[stem])

        def all(self) -> dict[str, list[dict[str, Any]]]:
            return self.log

    @ray.remote(num_cpus=0)
    def fingerprint(threads: int | None) -> dict[str, Any]:
        from mobilize.sweep.fingerprint import host_fingerprint

        return host_fingerprint(threads)

    @ray.remote
    def mobilize_sweep_model(job: dict[str, Any], stem: str, plan: dict[str, Any], cfg: dict[str, Any],
                             attempts) -> dict[str, Any]:
        import platform
        import shutil
        import tempfile

        from mobilize.sweep.runner import SweepConfig, run_job

        ray.get(attempts.start.remote(stem, ray.get_runtime_context().get_node_id(), platform.node(), os.getpid()))
        tmp = Path(tempfile.mkdtemp(prefix="mobilize-sweep-"))
        try:
            entry = run_job(ModelJob(job["reference"], job["input_dims"], tuple(job["variants"]), stem,
                                     job.get("input_type")), plan,
                            SweepConfig.from_json(cfg), tmp)
            files = []
            for p in sorted((tmp / stem).rglob("*")):
                if p.is_file():
                    data = p.read_bytes()
                    files.append((str(p.relative_to(tmp / stem)), hashlib.sha256(data).hexdigest(), data))
            return {"entry": entry.to_json(), "files": files, "workdir": str(tmp / stem)}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    return Attempts, fingerprint, mobilize_sweep_model


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None, cfg: Any):
        ray = _ray()
        self.ray = ray
        kwargs = {"namespace": "mobilize", "log_to_driver": False, "include_dashboard": False}
        self.temp_dir = None
        if address or os.environ.get("RAY_ADDRESS"):  # ray:auto finds the cluster this machine belongs to
            check_reachable(address)
            ray.init(address=address, **kwargs)
        else:  # no cluster given: a new one-node cluster on this machine, with its one bench slot
            from mobilize.core.paths import make_temp_dir

            self.temp_dir = make_temp_dir("sweep")  # named after this process: a killed run's is removed next time
            ray.init(address="local", resources={BENCH_RESOURCE: 1}, _temp_dir=str(self.temp_dir), **kwargs)
        self.nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(BENCH_RESOURCE)]
        if not self.nodes:
            ray.shutdown()
            raise ConfigError(f"no node of the Ray cluster offers the '{BENCH_RESOURCE}' resource",
                              hint=f"start each timing node with ray start ... --resources "
                                   f"'{{\"{BENCH_RESOURCE}\": 1}}'")
        self.parallel = len(self.nodes)

    def fingerprints(self, cfg: Any) -> list[dict[str, Any]]:
        """One fingerprint per timing node (a tiny task pinned to each)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        _, fingerprint, _ = _remote()
        refs = [fingerprint.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(cfg.compare.threads) for n in self.nodes]
        return self.ray.get(refs)

    def run(self, todo: list[tuple[ModelJob, ModelEntry]], plans: dict[str, dict], cfg: Any, out: Path,
            started: Callable[[ModelEntry], None], finished: Callable[[ModelEntry, ModelEntry], None],
            status: Callable[[str], None]) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not todo:
            return
        ray = self.ray
        Attempts, _, task = _remote()
        here = ray.get_runtime_context().get_node_id()
        attempts = Attempts.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
        cfg_json = cfg.to_json()
        pending = {}
        for job, entry in todo:
            ref = task.options(num_cpus=1, resources={BENCH_RESOURCE: 1}, max_retries=cfg.max_retries,
                               retry_exceptions=False).remote(job.to_json(), job.stem, plans[job.stem], cfg_json,
                                                              attempts)
            pending[ref] = (job, entry)
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=2.0)
                log = ray.get(attempts.all.remote())
                for job, entry in pending.values():
                    if entry.status == ModelStatus.PENDING and log.get(job.stem):
                        started(entry)
                for ref in ready:
                    job, entry = pending.pop(ref)
                    finished(entry, self._collect(ref, entry, out, log.get(job.stem, [])))
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

    def _collect(self, ref, entry: ModelEntry, out: Path, history: list[dict[str, Any]]) -> ModelEntry:
        from mobilize.core.errors import headline

        try:
            result = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            lost = dataclasses.replace(entry, status=ModelStatus.FAILED,
                                       error=f"lost on every attempt: {type(exc).__name__}: {headline(exc)}")
            lost.attempts, lost.retries = len(history), [_lost(i, h) for i, h in enumerate(history)]
            return lost
        done = ModelEntry.from_json(result["entry"])
        done.attempts = len(history)
        done.retries = [_lost(i, h) for i, h in enumerate(history[:-1])]
        self._write_files(result, out / done.stem)
        return done

    @staticmethod
    def _write_files(result: dict[str, Any], dest: Path) -> None:
        from mobilize.core.artifact import atomic_write_bytes

        manifest = {}
        for rel, sha, data in result["files"]:
            if hashlib.sha256(data).hexdigest() != sha:
                raise ConfigError(f"{rel} arrived corrupted (SHA-256 differs from the worker's)")
            if rel.endswith(("report.json", "report.html")):  # paths in the report: the worker's folder → ours
                data = data.replace(result["workdir"].encode(), str(dest).encode())
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(target, data)
            manifest[rel] = sha
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "files.json").write_text(json.dumps(manifest, indent=2, allow_nan=False) + "\n")

    def close(self) -> None:
        import shutil

        self.ray.shutdown()
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


CONNECT_TIMEOUT_S = 5.0
"""How long a ``ray:HOST:PORT`` address may take to accept a connection (Ray itself retries for minutes)."""


def check_reachable(address: str | None) -> None:
    """A ``HOST:PORT`` address that accepts no TCP connection is one line now, not minutes of Ray's retries
    and its log lines.  ``auto``, ``ray://`` and the RAY_ADDRESS environment are left to Ray."""
    import socket

    host, sep, port = (address or "").rpartition(":")
    if not sep or not host or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__.replace("timeout", "no answer")
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {why}",
                          hint="start it with `ray start --head --port PORT`, or check the address") from None


def _lost(i: int, h: dict[str, Any]) -> str:
    return f"attempt {i + 1} on {h['host']} (node {h['node_id'][:8]}, pid {h['pid']}) was lost; retried"
