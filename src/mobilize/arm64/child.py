"""The process that runs one artifact on a set of samples and writes its outputs: ``python -m
mobilize.arm64.child DIR``.  The same code runs inside the arm64 root (under QEMU) and on the host, so
the two sets of outputs differ only in the kernels that computed them.

DIR holds ``request.json`` (the artifacts' file names in DIR, their runtimes, threads), ``inputs.npz``
(``s<i>_<j>``: sample i, model input j); the child writes ``outputs.npz`` (``f<k>_s<i>_<j>``: file k,
sample i, output j) and ``machine.json`` (what it ran on: ``platform.machine()``, the QEMU CPU model, the CPU
features the kernel (or QEMU) reports in AT_HWCAP, the runtimes' versions, its wall time, which on
an emulated CPU is not a latency).  Arrays only, never pickles: nothing crosses as code.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

HWCAP = {"fp16": (16, 9), "asimdhp": (16, 10), "dotprod": (16, 20), "sve": (16, 22), "i8mm": (26, 13),
         "bf16": (26, 14), "sve2": (26, 1)}
"""aarch64 feature -> (auxv type, bit): AT_HWCAP=16, AT_HWCAP2=26 (Linux arch/arm64/include/uapi/asm/hwcap.h)."""

BASE_MODULES = ("torch", "numpy")
"""Beside every engine's declared packages (``Backend.packages``): the versions the report records."""


def cpu_features() -> dict[str, bool] | None:
    """The aarch64 features this process may use, as the kernel (QEMU, when emulated) reports them; None off
    aarch64."""
    if platform.machine() != "aarch64":
        return None
    import ctypes

    getauxval = ctypes.CDLL(None).getauxval
    getauxval.restype = ctypes.c_ulong
    getauxval.argtypes = [ctypes.c_ulong]
    return {name: bool(getauxval(kind) >> bit & 1) for name, (kind, bit) in HWCAP.items()}


def versions() -> dict[str, str]:
    import importlib.metadata as md

    from mobilize.core.backend import engine_packages
    from mobilize.core.packages import pip_name

    out = {"python": platform.python_version()}
    for name in (*BASE_MODULES, *engine_packages()):
        try:
            out[name] = md.version(pip_name(name))
        except md.PackageNotFoundError:
            pass
    return out


def set_quantized_engine() -> None:
    """qnnpack on aarch64: PyPI's aarch64 torch defaults to the "x86" engine (fbgemm), whose packed weights refuse
    to load there ("unknown architecure"); qnnpack is what PyTorch Mobile runs int8 with on arm."""
    import torch

    if platform.machine() == "aarch64" and "qnnpack" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "qnnpack"


def run(folder: Path) -> dict:
    """Every file of the request on the same samples, one after another (the runtimes import once: under
    emulation importing torch and executorch takes minutes).  A file that fails records its error."""
    import numpy as np
    import torch

    from mobilize.core.artifact import Artifact
    from mobilize.core.errors import UserError, third_party_failure, typed_headline
    from mobilize.runtimes.base import open_session

    request = json.loads((folder / "request.json").read_text())
    torch.set_num_threads(request["threads"])
    set_quantized_engine()
    with np.load(folder / "inputs.npz") as z:
        arrays = {k: z[k] for k in z.files}
    samples = []
    for i in range(request["samples"]):
        samples.append([torch.from_numpy(arrays[f"s{i}_{j}"]) for j in range(request["inputs"])])
    results, saved = [], {}
    for k, job in enumerate(request["files"]):
        t0 = time.perf_counter()
        try:  # a file its runtime refuses is recorded and the next file still runs; a bug in mobilize is raised
            with third_party_failure(f"running {job['artifact']}") as failed:
                with open_session(Artifact.from_file(folder / job["artifact"]), job.get("runtime"),
                                  threads=request["threads"]) as session:
                    outs = [session.run(x) for x in samples]
                    name = session.name
        except UserError as exc:
            results.append({"error": str(exc)[:300]})
            continue
        if failed.error is not None:
            results.append({"error": typed_headline(failed.error)[:300]})
            continue
        saved.update({f"f{k}_s{i}_{j}": t.detach().float().contiguous().numpy()
                      for i, o in enumerate(outs) for j, t in enumerate(o)})
        results.append({"runtime": name, "outputs": len(outs[0]) if outs else 0,
                        "wall_s_not_latency": time.perf_counter() - t0})
    np.savez(folder / "outputs.tmp.npz", **saved)
    os.replace(folder / "outputs.tmp.npz", folder / "outputs.npz")
    return {"machine": platform.machine(), "qemu_cpu": os.environ.get("QEMU_CPU"), "cpu_features": cpu_features(),
            "versions": versions(), "quantized_engine": torch.backends.quantized.engine, "files": results}


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    report = run(folder)
    (folder / "machine.json").write_text(json.dumps(report, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
