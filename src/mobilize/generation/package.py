"""A decoder file as a runnable package: the file, and beside it what an app needs to run it - the tokenizer
(``tokenizer.json`` and its config, the chat template when the tokenizer has one), the model's ``config.json`` and
``generation_config.json`` (its end-of-sequence tokens), and ``mobilize.json``, which names the file, the engine
that runs it and the lengths it holds.  ``mobilize generate FOLDER`` (:mod:`mobilize.generation.generate`) and
the Python API load a package from that folder alone.

    >>> import json, tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text(json.dumps({"eos_token_id": [2, 7], "max_position_embeddings": 64}))
    >>> stop_tokens(d)
    [2, 7]
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from mobilize.core.errors import ConfigError

MANIFEST = "mobilize.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "tokenizer.model", "chat_template.jinja", "added_tokens.json")
"""The files a transformers tokenizer is saved as (the fast one reads ``tokenizer.json``)."""
CONFIG_FILES = ("config.json", "generation_config.json")
PACKAGE_FILES = (*TOKENIZER_FILES, MANIFEST, "generation_config.json")
"""What a package adds beside a decoder file (not the model: left out of the file's size)."""


def copy_tokenizer(source: Path | None, folder: Path) -> list[str]:
    """The tokenizer's files from ``source`` (a saved model folder, or the zoo decoder's own) into ``folder``.
    Returns the names copied."""
    copied = []
    for name in TOKENIZER_FILES:
        if source is not None and (source / name).is_file():
            shutil.copy2(source / name, folder / name)
            copied.append(name)
    return copied


def write_package(model_folder: Path, path: Path, variant: Any, max_len: int | None, folder: Path) -> list[str]:
    """Into ``folder`` (the variant's own, holding the built file or folder ``path``): the tokenizer and configs of
    the model it was built from, and the manifest.  Returns notes (what a user cannot get from this package)."""
    path, folder = Path(path), Path(folder)
    for name in (*TOKENIZER_FILES, *CONFIG_FILES):
        if (model_folder / name).is_file() and not (folder / name).exists():
            shutil.copy2(model_folder / name, folder / name)
    manifest = {"file": str(path.relative_to(folder)), "variant": variant.name, "engine": variant.engine,
                "weights": variant.weights, "how": variant.how, "max_len": max_len,
                "tokenizer": (folder / "tokenizer.json").is_file()}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    notes = []
    if not manifest["tokenizer"]:
        notes.append("package: the model has no tokenizer.json, so this file takes token ids, not text (save the "
                     "tokenizer beside the model to get one)")
    return notes


@dataclasses.dataclass(frozen=True)
class Package:
    """A decoder file and what runs it, as :func:`open_package` found it."""

    folder: Path
    file: Path
    variant: str
    engine: str
    max_len: int | None
    """Tokens its cache holds (prompt and generated together); None: as the file says when it loads."""


def open_package(path: Path) -> Package:
    """The package at ``path``: a folder with ``mobilize.json`` (compare's ``artifacts/NAME/``), or a file in one."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path} does not exist", hint="give a folder under artifacts/ that compare or optimize wrote")
    # the package folder, or a file in one (a folder file such as ExecuTorch's lives in its package too)
    folder = path if path.is_dir() and (path / MANIFEST).is_file() else path.parent
    if path.is_dir() and not (path / MANIFEST).is_file() and not (path.parent / MANIFEST).is_file():
        folder = path  # a folder that is no package: named itself, not its parent
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise ConfigError(f"{path} is no decoder package: {folder} has no {MANIFEST}",
                          hint="give a folder under artifacts/ that mobilize compare or optimize wrote for a causal LM")
    try:
        manifest = json.loads(manifest_path.read_text())
        file = folder / manifest["file"]
        package = Package(folder, file, str(manifest["variant"]), str(manifest["engine"]), manifest.get("max_len"))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{manifest_path} cannot be read ({exc})") from None
    from mobilize.generation.plan import generation_variants

    [variant] = generation_variants([package.variant])
    if variant.engine != package.engine:  # the label would name an engine that is not the one running the file
        raise ConfigError(f"{manifest_path} says engine '{package.engine}', but its variant {variant.name} runs in "
                          f"{variant.engine}: the manifest was edited or is not mobilize's",
                          hint=f"set \"engine\": \"{variant.engine}\" in it, or build the package again")
    return package


def stop_tokens(folder: Path) -> list[int]:
    """The end-of-sequence token ids the model's configs name (``generation_config.json`` first)."""
    for name in ("generation_config.json", "config.json"):
        try:
            value = json.loads((Path(folder) / name).read_text()).get("eos_token_id")
        except (OSError, ValueError):
            continue
        if value is not None:
            return [int(v) for v in (value if isinstance(value, list) else [value])]
    return []


def context_of(folder: Path) -> int | None:
    """The longest sequence the model was made for, as its ``config.json`` says."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = next((config.get(k) for k in ("max_position_embeddings", "n_positions") if config.get(k)), None)
    return int(value) if value else None
