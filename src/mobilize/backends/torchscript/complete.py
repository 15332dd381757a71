"""Is a TorchScript or lite-interpreter archive whole?"""

from __future__ import annotations

from pathlib import Path

from mobilize.core.completeness import check_zip


def check_archive(path: Path) -> None:
    check_zip(path, "TorchScript file")
