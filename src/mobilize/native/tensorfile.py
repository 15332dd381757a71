"""Tensor lists on disk in the layout the native programs read and write (``cpp/tensor_file.h``).

``"MBT1"``, uint32 count, then per tensor: uint32 dtype (c10 ScalarType code), uint32 ndim,
int64 sizes, uint64 nbytes, the data in logical row-major order; all little-endian.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Sequence

from mobilize.core.errors import InternalError

MAGIC = b"MBT1"
DTYPE_CODES = {"uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5, "float32": 6, "float64": 7,
               "bool": 11, "bfloat16": 15}
"""torch dtype name -> c10/ExecuTorch ScalarType code."""


def write_tensors(path: str | Path, tensors: Sequence) -> None:
    import torch

    chunks = [MAGIC, struct.pack("<I", len(tensors))]
    for t in tensors:
        t = torch.as_tensor(t).detach().cpu().contiguous()
        name = str(t.dtype).replace("torch.", "")
        if name not in DTYPE_CODES:
            raise InternalError(f"cannot hand a {name} tensor to a native program")
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        chunks += [struct.pack("<II", DTYPE_CODES[name], t.dim()), struct.pack(f"<{t.dim()}q", *t.shape),
                   struct.pack("<Q", len(data)), data]
    Path(path).write_bytes(b"".join(chunks))


def read_tensors(path: str | Path) -> list:
    import torch

    data = Path(path).read_bytes()
    if data[:4] != MAGIC:
        raise InternalError(f"{path} is not a tensor file written by a native program")
    names = {code: name for name, code in DTYPE_CODES.items()}
    (count,), pos = struct.unpack_from("<I", data, 4), 8
    out = []
    for _ in range(count):
        code, ndim = struct.unpack_from("<II", data, pos)
        pos += 8
        shape = struct.unpack_from(f"<{ndim}q", data, pos)
        pos += 8 * ndim
        (nbytes,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        dtype = getattr(torch, names[code])
        raw = bytearray(data[pos:pos + nbytes])
        pos += nbytes
        flat = torch.frombuffer(raw, dtype=dtype) if nbytes else torch.empty(0, dtype=dtype)
        out.append(flat.reshape(shape))
    return out
