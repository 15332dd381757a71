"""The one check for optional Python packages: which are missing, the pip name that installs each, and the
one-line error that says what to install.  Every exporter, runtime, lint probe, decoder and plan asks here.

    >>> missing(("math", "no_such_package_xyz"))
    ['no_such_package_xyz']
    >>> pip_name("ai_edge_litert"), install_hint(["no_such_package_xyz", "sklearn"])
    ('ai-edge-litert', 'pip install no-such-package-xyz scikit-learn')
    >>> require(("no_such_package_xyz",), "the demo runtime")
    Traceback (most recent call last):
    mobilize.core.errors.BackendUnavailableError: the demo runtime needs the Python package 'no-such-package-xyz' (pip install no-such-package-xyz)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Iterable

from mobilize.core.errors import BackendUnavailableError

PIP_NAMES = {"sklearn": "scikit-learn", "PIL": "Pillow", "cv2": "opencv-python", "yaml": "PyYAML"}
"""Import names whose distribution is called something else (any other: the import name, ``_`` as ``-``)."""


def pip_name(package: str) -> str:
    """The distribution ``pip install`` takes for the importable ``package``."""
    top = package.split(".")[0]
    return PIP_NAMES.get(top, top.replace("_", "-"))


def installed(package: str) -> bool:
    """True when ``package`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:  # a dotted name whose parent is missing
        return False


def missing(packages: Iterable[str]) -> list[str]:
    """The packages of ``packages`` that cannot be imported, in order, each once."""
    return [p for p in dict.fromkeys(packages) if not installed(p)]


def install_hint(packages: Iterable[str]) -> str:
    return "pip install " + " ".join(dict.fromkeys(pip_name(p) for p in packages))


def require(packages: Iterable[str], who: str) -> None:
    """A BackendUnavailableError naming the first missing package when any of ``packages`` is missing (``who``:
    what needs them, ``runtime 'onnxruntime'``); the hint installs every missing one."""
    gone = missing(packages)
    if gone:
        raise BackendUnavailableError(f"{who} needs the Python package '{pip_name(gone[0])}'",
                                      hint=install_hint(gone))


def location(package: str) -> Path | None:
    """The folder an installed package is imported from (its wheel's files: headers, libraries); None when it is
    not installed or is a single module."""
    if not installed(package):
        return None
    spec = importlib.util.find_spec(package)
    return Path(list(spec.submodule_search_locations)[0]) if spec and spec.submodule_search_locations else None
