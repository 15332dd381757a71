"""The devices file and the devices' names: ``host``, ``arm64``, ``ssh://...`` or a name the file holds, each made
into a :class:`~mobilize.devices.base.Device` of its kind (nothing is contacted yet)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mobilize.core.errors import ConfigError
from mobilize.devices.base import Device

KINDS = ("host", "arm64", "ssh")
"""The kinds of device, each one module (:func:`_make` says which)."""
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def devices_file() -> Path:
    return Path(os.environ.get("MOBILIZE_DEVICES") or Path.home() / ".config" / "mobilize" / "devices.json")


def load_entries() -> dict[str, dict[str, Any]]:
    path = devices_file()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the devices file {path}: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) and "url" in v for v in data.values()):
        raise ConfigError(f"the devices file {path} is not a map of names to {{\"url\": ...}} entries")
    return data


def save_entries(entries: dict[str, dict[str, Any]]) -> Path:
    path = devices_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def check_name(name: str) -> str:
    if not name or not set(name) <= NAME_CHARS or name in ("host", "arm64") or name.startswith("ssh:"):
        raise ConfigError(f"'{name}' cannot name a device",
                          hint="letters, digits, '-', '_' and '.'; host and arm64 are the built-in devices")
    return name


def _make(kind: str, *args: Any) -> Device:
    """A device of ``kind``; its module imported only when one is used (a new kind: its module, one branch here)."""
    if kind == "host":
        from mobilize.devices.host import HostDevice

        return HostDevice(*args)
    if kind == "arm64":
        from mobilize.devices.qemu import QemuDevice

        return QemuDevice(*args)
    from mobilize.devices.ssh import loads_entry

    return loads_entry(*args)


def resolve(spec: str, *, arm64_cpu: str | None = None) -> Device:
    """``host``, ``arm64``, ``ssh://...`` or a devices-file name -> a Device (nothing is contacted yet)."""
    if spec == "host":
        return _make("host", "host")
    if spec == "arm64":
        return _make("arm64", "arm64", *([arm64_cpu] if arm64_cpu else []))
    if spec.startswith("ssh://"):
        from mobilize.devices.ssh import parse_url

        parse_url(spec)
        return _make("ssh", spec, {"url": spec})
    entries = load_entries()
    if spec not in entries:
        from mobilize.core.registry import did_you_mean

        known = ["host", "arm64", *entries]
        raise ConfigError(f"unknown device '{spec}'; {did_you_mean(spec, known)}",
                          hint=f"add it with `mobilize devices add {spec} ssh://[user@]host[:port]` "
                               f"(devices file: {devices_file()})")
    return _make("ssh", spec, entries[spec])


