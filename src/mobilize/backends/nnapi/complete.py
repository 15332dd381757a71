"""Is an NNAPI model archive (.ptl) whole?"""

from __future__ import annotations

from pathlib import Path

from mobilize.core.completeness import check_zip


def check_archive(path: Path) -> None:
    check_zip(path, "NNAPI model (.ptl)")
