"""A model reference parsed once: what the user wrote, typed.

The command line (or the Python API) parses the reference string once into a :class:`ModelRef`; it travels
to every check and child process as it is, and :func:`mobilize.sources.models.resolve_model` builds the model
from its fields without parsing the text again.

    >>> ModelRef.parse("zoo:conv_bn_relu")
    ModelRef(text='zoo:conv_bn_relu', kind=<RefKind.ZOO: 'zoo'>, path='', module='', attribute='conv_bn_relu', format='')
    >>> ref = ModelRef.parse("models/net.py:Net")
    >>> (ref.kind, ref.path, ref.attribute, str(ref))
    (<RefKind.PYTHON_FILE: 'python-file'>, 'models/net.py', 'Net', 'models/net.py:Net')
    >>> ModelRef.parse("out/model.onnx").format, ModelRef.parse("torchvision.models:mobilenet_v2").module
    ('onnx', 'torchvision.models')
    >>> ModelRef.parse(ref) is ref
    True
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from pathlib import Path

from mobilize.backends import format_for_suffix
from mobilize.core.errors import ConfigError


class RefKind(enum.StrEnum):
    ZOO = "zoo"
    """``zoo:NAME``: a built-in model."""
    PYTHON_FILE = "python-file"
    """``file.py:Class`` (or a factory): the user's source file."""
    FILE = "file"
    """A model file (``.pt``, ``.pte``, ``.onnx``, ``.xml``, ...)."""
    IMPORT = "import"
    """``pkg.mod:factory``: an importable module."""
    MODEL_FOLDER = "model-folder"
    """A saved transformers model (a folder with ``config.json`` and its weights, as ``save_pretrained`` writes)."""


@dataclasses.dataclass(frozen=True)
class ModelRef:
    text: str
    """The reference as the user wrote it (stripped): what reports and messages print."""
    kind: RefKind
    path: str = ""
    """The Python file (``python-file``) or the model file (``file``)."""
    module: str = ""
    """The module to import (``import``)."""
    attribute: str = ""
    """The zoo name, or the class or factory in the file or module."""
    format: str = ""
    """A model file's format as its suffix names it (a backend may still claim the file as another)."""

    def __str__(self) -> str:
        return self.text

    @property
    def module_name(self) -> str:
        """The name a user's Python file is imported under: the same in every process (a hash of its resolved
        path, not Python's per-process ``hash()``), so a module pickled in one process unpickles in another."""
        digest = hashlib.sha1(str(Path(self.path).resolve()).encode()).hexdigest()[:16]
        return f"mobilize_user_{digest}"

    @classmethod
    def parse(cls, reference: "str | ModelRef") -> "ModelRef":
        """The typed reference (a ModelRef is returned as it is: parsed once)."""
        if isinstance(reference, ModelRef):
            return reference
        text = str(reference).strip()
        if not text:
            raise ConfigError("empty model reference",
                              hint="use zoo:NAME, file.py:Class, pkg.mod:factory or a model file")
        if text.startswith("zoo:"):
            return cls(text, RefKind.ZOO, attribute=text[4:])
        head, sep, attr = text.rpartition(":")
        if sep and head.endswith(".py"):
            return cls(text, RefKind.PYTHON_FILE, path=head, attribute=attr)
        if Path(text).is_dir() and (Path(text) / "config.json").is_file():
            return cls(text, RefKind.MODEL_FOLDER, path=text)
        suffix = Path(text).suffix.lower()
        fmt = format_for_suffix(suffix)
        if fmt or Path(text).exists() or "/" in text:
            return cls(text, RefKind.FILE, path=text, format=fmt or "")
        if sep and head and attr:
            return cls(text, RefKind.IMPORT, module=head, attribute=attr)
        from mobilize.zoo import ZOO

        raise ConfigError(f"cannot resolve model reference '{text}'",
                          hint=f"use zoo:NAME ({', '.join(ZOO.names())}), file.py:Class, pkg.mod:factory or a model file")
