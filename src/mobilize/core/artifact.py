"""Artifacts: a model file on disk plus its manifest (format, input specs, recipe, size, sha256, notes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from mobilize.core.jsonfile import dumps_measured
from mobilize.core.errors import ConfigError, UserError
from mobilize.core.paths import temp_prefix
from mobilize.core.inputs import InputSpec


Format = str
"""A file format's name (``onnx``, ``executorch`` ...): each backend declares the formats it owns, their suffixes
and side files (:mod:`mobilize.backends`); the set is open, not a closed enum."""


def artifact_size_bytes(path: str | os.PathLike, fmt: Format) -> int:
    """The artifact's size on disk, side files included (an OpenVINO ``.xml`` is a few kB; its ``.bin`` holds the weights)."""
    from mobilize.core.backend import side_files

    path = Path(path)
    sides = [path.with_suffix(s) for s in side_files(fmt)]
    return path.stat().st_size + sum(p.stat().st_size for p in sides if p.exists())


def format_for_path(path: str | os.PathLike) -> Format:
    """The format a file's suffix names, then refined by any backend that claims the file (an NNAPI model inside
    a ``.ptl``)."""
    from mobilize.core.backend import claim, format_for_suffix, suffixes

    suffix = Path(path).suffix.lower()
    fmt = format_for_suffix(suffix)
    if fmt is None:
        raise ConfigError(
            f"unknown model file suffix '{suffix or Path(path).name}' for {path}",
            hint=f"known suffixes: {', '.join(suffixes())}; or use zoo:NAME, file.py:Class, pkg.mod:factory",
        )
    return claim(path, fmt)


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temp file in the same folder, then rename: no half-written file survives."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix("tmp", path.name), suffix=".tmp", dir=path.parent)
    os.chmod(tmp, _umask_mode())
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


class atomic_path:
    """Context manager yielding a temp path next to ``path``; renamed into place on success.

    For writers that need a file name (``torch.jit.save``, ``onnx.save``)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __enter__(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # named after this process (mobilize.core.paths): a run killed mid-write leaves a temp the next run removes
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix("tmp", self.path.stem), suffix=self.path.suffix,
                                   dir=self.path.parent)
        os.close(fd)
        os.chmod(tmp, _umask_mode())
        self.tmp = Path(tmp)
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)


@dataclasses.dataclass
class Artifact:
    """A model file and what is known about it."""

    path: Path
    format: Format
    input_specs: list[InputSpec] = dataclasses.field(default_factory=list)
    recipe: dict[str, Any] | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    size_bytes: int = 0
    sha256: str = ""
    bound_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Non-tensor forward arguments fixed when the file was built (``--input sr=16000``)."""

    @classmethod
    def from_file(cls, path: str | os.PathLike, **fields: Any) -> "Artifact":
        path = Path(path)
        if not path.exists():
            raise UserError(f"model file not found: {path}")
        if path.is_dir():
            raise UserError(f"model path is a folder, not a file: {path}")
        fmt = fields.pop("format", None)
        if fmt is None:
            fmt = format_for_path(path)
        art = cls(path=path, format=str(fmt), **fields)
        art.size_bytes = artifact_size_bytes(path, art.format)
        manifest = art.manifest_path
        if manifest.exists() and not art.input_specs:
            data = json.loads(manifest.read_text())
            if data.get("sha256") == sha256_of(path):
                art.input_specs = [InputSpec.from_json(s) for s in data.get("input_specs", [])]
                art.recipe = data.get("recipe")
                art.notes = list(data.get("notes", []))
                art.bound_args = dict(data.get("bound_args") or {})
        return art

    @property
    def manifest_path(self) -> Path:
        return self.path.with_name(self.path.name + ".manifest.json")

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": str(self.format),
            "input_specs": [s.to_json() for s in self.input_specs],
            "recipe": self.recipe,
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
            "notes": list(self.notes),
            **({"bound_args": dict(self.bound_args)} if self.bound_args else {}),
        }

    def write_manifest(self) -> Path:
        self.size_bytes = artifact_size_bytes(self.path, self.format)
        self.sha256 = sha256_of(self.path)
        atomic_write_text(self.manifest_path, dumps_measured(self.to_json(), indent=2) + "\n")
        return self.manifest_path
