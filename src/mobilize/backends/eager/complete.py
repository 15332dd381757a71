"""Is an ExportedProgram (.pt2) whole?"""

from __future__ import annotations

import zipfile
from pathlib import Path

from mobilize.core.completeness import check_zip
from mobilize.core.errors import UnsupportedModelError


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
