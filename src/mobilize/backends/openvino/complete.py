"""Is an OpenVINO IR whole?  Its ``.xml`` names, for every constant, an offset and a size in the ``.bin`` beside it:
a ``.bin`` cut short (an interrupted copy) made OpenVINO's reader stop at "Exception from
src/inference/src/cpp/core.cpp:84:" with no reason; this says which weights file is short, and by how much.

    >>> import tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "m.xml").write_text('<net><layers><layer type="Const"><data offset="0" size="64"/></layer>'
    ...                              '</layers></net>')
    >>> _ = (d / "m.bin").write_bytes(bytes(40))
    >>> check_ir(d / "m.xml")
    Traceback (most recent call last):
    ...
    mobilize.core.errors.UnsupportedModelError: m.bin is shorter than m.xml needs: its constants end at byte 64, the file has 40 bytes ...
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path

from mobilize.core.completeness import HINT
from mobilize.core.errors import UnsupportedModelError


def check_ir(path: Path) -> None:
    """The ``.xml`` parses, and every constant's bytes lie inside its ``.bin`` (which must be there when any
    constant is stored)."""
    path = Path(path)
    if path.suffix.lower() != ".xml":
        return
    try:
        root = ElementTree.parse(path).getroot()
    except (ElementTree.ParseError, OSError) as exc:
        raise UnsupportedModelError(f"{path} is not a valid OpenVINO IR: truncated or corrupt XML ({exc})",
                                    hint=HINT) from None
    end = 0
    for data in root.iter("data"):
        offset, size = data.get("offset"), data.get("size")
        if offset is not None and size is not None and offset.isdigit() and size.isdigit():
            end = max(end, int(offset) + int(size))
    if not end:
        return
    weights = path.with_suffix(".bin")
    if not weights.is_file():
        raise UnsupportedModelError(f"{path} keeps its weights in {weights.name}, which is missing",
                                    hint="keep the .bin beside the .xml")
    have = weights.stat().st_size
    if have < end:
        raise UnsupportedModelError(f"{weights.name} is shorter than {path.name} needs: its constants end at byte "
                                    f"{end}, the file has {have} bytes (truncated or from another export)",
                                    hint=HINT)
