"""Is a model file whole?  One check per format (each backend declares its own), run on every file a user hands to mobilize before
any runtime reads it: a file cut short (an interrupted copy or download) is a one-line user error,
not a crash, a raw traceback or, worse, a run on whatever part of it was there.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from mobilize.core.errors import UnsupportedModelError

HINT = "export it again, or copy the whole file"


def check_zip(path: Path, what: str = "PyTorch archive") -> None:
    """PyTorch archives (.pt, .ptl, .pt2) are zip files: the central directory (at the very end) must be
    there, and every member's data must lie inside the file."""
    size = path.stat().st_size
    try:
        if not ends_with_directory(path, size):  # a cut file can still hold an inner zip's directory
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


def ends_with_directory(path: Path, size: int) -> bool:
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


def check_complete(path: str | os.PathLike, fmt: str) -> None:
    """The check of the backend that owns ``fmt`` (its descriptor's ``complete``); formats without one are
    checked by their runtime when it loads them."""
    from mobilize.core.backend import checker_for

    check = checker_for(fmt)
    if check is not None:
        check(Path(path))
