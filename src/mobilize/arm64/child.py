"""The process that runs one artifact on a set of samples and writes its outputs: ``python -m
mobilize.arm64.child DIR``.  The same code runs inside the arm64 root (under QEMU) and on the host, so
the two sets of outputs differ only in the kernels that computed them.

DIR holds ``request.json`` (the artifact's file name in DIR, its runtime, threads), ``inputs.npz``
(``s<i>_<j>``: sample i, model input j); the child writes ``outputs.npz`` (``s<i>_<j>``: sample i,
output j) and ``machine.json`` (what it ran on: ``platform.machine()``, the QEMU CPU model, the CPU
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

RUNTIME_MODULES = ("torch", "executorch", "onnxruntime", "openvino", "ai_edge_litert", "numpy")


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

    out = {"python": platform.python_version()}
    for name in RUNTIME_MODULES:
        dist = {"ai_edge_litert": "ai-edge-litert"}.get(name, name)
        try:
            out[name] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


def run(folder: Path) -> dict:
    import numpy as np
    import torch

    from mobilize.artifact import Artifact
    from mobilize.runtimes.base import open_session

    request = json.loads((folder / "request.json").read_text())
    torch.set_num_threads(request["threads"])
    with np.load(folder / "inputs.npz") as z:
        arrays = {k: z[k] for k in z.files}
    samples = []
    for i in range(request["samples"]):
        samples.append([torch.from_numpy(arrays[f"s{i}_{j}"]) for j in range(request["inputs"])])
    artifact = Artifact.from_file(folder / request["artifact"])
    t0 = time.perf_counter()
    with open_session(artifact, request.get("runtime"), threads=request["threads"]) as session:
        outs = [session.run(x) for x in samples]
        name = session.name
    wall_s = time.perf_counter() - t0
    np.savez(folder / "outputs.npz.tmp.npz", **{f"s{i}_{j}": t.detach().float().contiguous().numpy()
                                               for i, o in enumerate(outs) for j, t in enumerate(o)})
    os.replace(folder / "outputs.npz.tmp.npz", folder / "outputs.npz")
    return {"machine": platform.machine(), "qemu_cpu": os.environ.get("QEMU_CPU"), "cpu_features": cpu_features(),
            "runtime": name, "versions": versions(), "outputs": len(outs[0]) if outs else 0,
            "wall_s_not_latency": wall_s}


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    report = run(folder)
    (folder / "machine.json").write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
