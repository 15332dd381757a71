"""Devices: the places a file is loaded, checked on samples and timed (:mod:`mobilize.devices.base`).

Kinds: ``host`` (this machine), ``arm64`` (the arm64 root under QEMU: arm64 kernels, emulated times), and
``ssh://[user@]host[:port]`` (a Linux machine over SSH, :mod:`mobilize.devices.ssh`), or a name from the devices file
(``mobilize devices add NAME ssh://...``; ``$MOBILIZE_DEVICES``, default ``~/.config/mobilize/devices.json``).  A
new kind is one module with one :class:`~mobilize.devices.base.Device` class, and one branch in
:func:`mobilize.devices.registry._make`.
"""

from __future__ import annotations

from mobilize.devices.base import Device, DeviceLost
from mobilize.devices.registry import KINDS, check_name, devices_file, load_entries, resolve, save_entries

__all__ = ["Device", "DeviceLost", "KINDS", "check_name", "devices_file", "load_entries", "resolve", "save_entries"]
