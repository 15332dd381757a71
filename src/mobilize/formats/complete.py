"""Is a model file whole?  One check per format, run on every file a user hands to mobilize before
any runtime reads it: a file cut short (an interrupted copy or download) is a one-line user error,
not a crash, a raw traceback or, worse, a run on whatever part of it was there.

    >>> check_complete("model.pte", Format.EXECUTORCH)      # declared sizes and segments vs the file length
    >>> check_complete("cut.pt2", Format.EXPORTED_PROGRAM)
    Traceback (most recent call last):
    mobilize.errors.UnsupportedModelError: cut.pt2 is not a valid ExportedProgram (.pt2): truncated or corrupt, ...
"""

from __future__ import annotations

import functools
import os
import zipfile
from pathlib import Path
from typing import Callable

from mobilize.artifact import Format
from mobilize.errors import UnsupportedModelError

HINT = "export it again, or copy the whole file"


def check_zip(path: Path, what: str = "PyTorch archive") -> None:
    """PyTorch archives (.pt, .ptl, .pt2) are zip files: the central directory (at the very end) must be
    there, and every member's data must lie inside the file."""
    size = path.stat().st_size
    try:
        if not _ends_with_directory(path, size):  # a cut file can still hold an inner zip's directory
            raise zipfile.BadZipFile("no end-of-archive record at the end of the file")
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UnsupportedModelError(f"{path} is not a valid {what}: truncated or corrupt, not a complete zip "
                                    f"archive ({exc})", hint=HINT) from None
    if members and min(info.header_offset for info in members) != 0:
        # the directory found belongs to an archive stored inside this one (.pt2 files nest one): the end is cut
        raise UnsupportedModelError(f"{path} is not a valid {what}: truncated or corrupt, its last part is missing",
                                    hint=HINT)
    for info in members:
        # local header (30 bytes + name + extra) then the data; the extra field's length is only in the local header
        end = info.header_offset + 30 + len(info.filename.encode()) + info.compress_size
        if end > size:
            raise UnsupportedModelError(f"{path} is not a valid {what}: truncated or corrupt, member "
                                        f"{info.filename} ends at byte {end}, past the end of the file ({size} bytes)",
                                        hint=HINT)


def check_pt2(path: Path) -> None:
    """A whole zip that holds an ExportedProgram: PT2 archives name their layout in ``*/archive_format``
    (torch 2.7 and older wrote a top-level ``version``)."""
    what = "ExportedProgram (.pt2)"
    check_zip(path, what)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if not any(n.endswith("/archive_format") or n == "version" for n in names):
        raise UnsupportedModelError(f"{path} is not a valid {what}: a zip archive without an exported program "
                                    f"(it holds {', '.join(names[:3])}{', ...' if len(names) > 3 else ''})",
                                    hint="write it with torch.export.save")


def _ends_with_directory(path: Path, size: int) -> bool:
    """The zip's end-of-central-directory record (22 bytes + its comment) closes the file exactly."""
    with open(path, "rb") as fh:
        fh.seek(max(0, size - 22 - 0xFFFF))
        tail = fh.read()
    pos = tail.rfind(b"PK\x05\x06")
    while pos >= 0:
        if len(tail) - pos >= 22 and pos + 22 + int.from_bytes(tail[pos + 20:pos + 22], "little") == len(tail):
            return True
        pos = tail.rfind(b"PK\x05\x06", 0, pos)
    return False


def check_onnx(path: Path) -> None:
    """An .onnx must parse as a whole protobuf with a graph, an opset and outputs, and every tensor it
    keeps in external data files must lie inside them.  (.ort files are ONNX Runtime's own format: left
    to ONNX Runtime.)"""
    if path.suffix.lower() != ".onnx":
        return
    try:
        import onnx
    except ImportError:  # ONNX Runtime reads the file itself and says what is wrong with it
        return
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # google.protobuf.message.DecodeError and friends
        raise UnsupportedModelError(f"{path} is not a valid ONNX model: truncated or corrupt, not a complete "
                                    f"protobuf ({type(exc).__name__})", hint=HINT) from None
    if not model.HasField("graph") or not model.graph.output or not model.opset_import:
        missing = [name for name, ok in (("graph", model.HasField("graph")), ("outputs", bool(model.graph.output)),
                                         ("opset", bool(model.opset_import))) if not ok]
        raise UnsupportedModelError(f"{path} is not a valid ONNX model: truncated or corrupt, it has no "
                                    f"{', '.join(missing)}", hint=HINT)
    for tensor in _external_tensors(model.graph):
        info = {e.key: e.value for e in tensor.external_data}
        data_file = path.parent / info.get("location", "")
        if not info.get("location") or not data_file.is_file():
            raise UnsupportedModelError(f"{path}: tensor '{tensor.name}' is stored in {data_file.name or '?'}, "
                                        f"which is missing", hint="keep the external data files beside the .onnx")
        end = int(info.get("offset", 0)) + int(info.get("length", 0))
        if end > data_file.stat().st_size:
            raise UnsupportedModelError(f"{path}: tensor '{tensor.name}' ends at byte {end} of {data_file.name}, "
                                        f"past its end ({data_file.stat().st_size} bytes)", hint=HINT)


def _external_tensors(graph) -> list:
    out = [t for t in graph.initializer if t.data_location == 1]  # TensorProto.EXTERNAL
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                out += _external_tensors(attr.g)
            for g in attr.graphs:
                out += _external_tensors(g)
    return out


def _check_executorch(path: Path) -> None:
    from mobilize.formats.pte import check_complete as check_pte

    check_pte(path)


CHECKS: dict[Format, Callable[[Path], None]] = {
    Format.TORCHSCRIPT: functools.partial(check_zip, what="TorchScript file"),
    Format.LITE: functools.partial(check_zip, what="TorchScript file"),
    Format.NNAPI: functools.partial(check_zip, what="NNAPI model (.ptl)"),
    Format.EXPORTED_PROGRAM: check_pt2,
    Format.EXECUTORCH: _check_executorch,
    Format.ONNX: check_onnx,
}
"""Format -> its completeness check.  Formats without an entry are checked by their runtime when it loads them."""


def check_complete(path: str | os.PathLike, fmt: Format) -> None:
    check = CHECKS.get(Format(fmt))
    if check is not None:
        check(Path(path))
