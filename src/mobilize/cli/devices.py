"""``mobilize devices``: the machines files are checked and timed on (``compare --on NAME``).

    $ mobilize devices add pi5 ssh://pi@raspberrypi.local
    $ mobilize devices check pi5
    pi5 (ssh://pi@raspberrypi.local): aarch64, Cortex-A76 x4 (NEON, dotprod), 8.0 GB, Debian GNU/Linux 12, Python 3.11
    $ mobilize devices list
    $ mobilize devices clean pi5

Exit status: 0 when done; 2 for a bad name or address, an unreachable device, or one that lacks what mobilize needs
(``check`` says what).
"""

from __future__ import annotations

import argparse

NEEDS = ("numpy", "torch")
"""What the device child cannot run without (each engine's runtime is needed only for its own files)."""
MIN_PYTHON = (3, 10)


def add_parser(sub) -> None:
    p = sub.add_parser("devices", help="the machines files are checked and timed on (compare --on NAME)",
                       description="Name the machines compare checks and times files on: a Linux machine over SSH "
                                   "(your own OpenSSH client, config and agent; nothing stored but the address), and "
                                   "say what is there.",
                       epilog="exit status: 0 when done; 2 for a bad name or address, an unreachable device, or one "
                              "that lacks what mobilize needs", formatter_class=argparse.RawDescriptionHelpFormatter)
    dsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = dsub.add_parser("add", help="name a device: NAME ssh://[user@]host[:port]")
    a.add_argument("name", metavar="NAME")
    a.add_argument("url", metavar="ssh://[user@]host[:port]")
    a.add_argument("--python", default=None, metavar="PATH",
                   help="the device's Python with numpy, torch and the runtimes (default: python3 on its PATH)")
    a.add_argument("--cache", default=None, metavar="DIR",
                   help="the folder on the device that holds everything mobilize puts there (default "
                        "~/.cache/mobilize-device)")
    a.add_argument("--ssh-config", default=None, metavar="FILE",
                   help="an ssh_config file for this device (ssh -F; default: your own ~/.ssh/config)")
    dsub.add_parser("list", help="the devices file's devices")
    for action, text in (("check", "what is on the device: arch, CPU, cores, memory, OS, Python, disk, runtimes"),
                         ("clean", "remove mobilize's cache folder on the device"),
                         ("remove", "forget a device (its cache folder stays: clean it first)")):
        dsub.add_parser(action, help=text).add_argument("name", metavar="NAME")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mobilize import devices

    if args.action == "add":
        return _add(args)
    if args.action == "list":
        entries = devices.load_entries()
        if not entries:
            print(f"no devices yet ({devices.devices_file()}); add one: mobilize devices add NAME ssh://user@host")
        for name, entry in sorted(entries.items()):
            extra = "".join(f"  {k} {entry[k]}" for k in ("python", "cache", "ssh_config") if entry.get(k))
            print(f"{name}  {entry['url']}{extra}")
        return 0
    if args.action == "remove":
        entries = devices.load_entries()
        if entries.pop(args.name, None) is None:
            devices.resolve(args.name)  # says it is unknown, with the names there are
        devices.save_entries(entries)
        print(f"forgot {args.name}")
        return 0
    device = devices.resolve(args.name)
    try:
        if args.action == "clean":
            if device.kind != "ssh":
                from mobilize.core.errors import ConfigError

                raise ConfigError(f"{args.name} keeps no cache folder (only an SSH device does)")
            print(device.clean())
            return 0
        return _check(device)
    finally:
        device.close()


def _add(args: argparse.Namespace) -> int:
    from mobilize import devices
    from mobilize.devices.ssh import parse_url

    devices.check_name(args.name)
    parse_url(args.url)
    entries = devices.load_entries()
    entries[args.name] = {"url": args.url, **{k: v for k, v in (("python", args.python), ("cache", args.cache),
                                                                ("ssh_config", args.ssh_config)) if v}}
    path = devices.save_entries(entries)
    print(f"{args.name} -> {args.url} (in {path}); `mobilize devices check {args.name}` says what is there")
    return 0


def _check(device) -> int:
    from mobilize.core.errors import ConfigError

    facts = device.probe()
    print(describe(device, facts))
    lacks = lacking(facts)
    if lacks:
        raise ConfigError(f"{device.name} lacks {'; '.join(lacks)}",
                          hint="install them into the device's Python, or name another with "
                               "`mobilize devices add NAME URL --python PATH`")
    return 0


def describe(device, facts: dict) -> str:
    """The device's facts in two lines: what it is, then what it holds."""
    from mobilize.compare.recommend import ISA_NAMES

    cpu = facts.get("cpu") or {}
    isa = [name for name, flags in ISA_NAMES if any(f in cpu.get("flags", []) for f in flags)]
    mem = facts.get("memory_mb")
    clock = (f", {facts['governor'] or '?'} governor at {facts['clock_mhz']:.0f}/{facts['clock_max_mhz']:.0f} MHz"
             if facts.get("clock_mhz") and facts.get("clock_max_mhz") else "")
    temp = f", {facts['temp_c']:.0f} C" if facts.get("temp_c") is not None else ""
    free = f", {facts['free_disk_mb'] / 1024:.1f} GB free" if facts.get("free_disk_mb") is not None else ""
    where = device.describe().get("url", device.kind)
    memory = f"{mem / 1024:.1f} GB" if mem else "memory unknown"
    head = (f"{device.name} ({where}): {facts.get('machine')}, {cpu.get('model')} x{facts.get('cores')} "
            f"({', '.join(isa) or 'no SIMD extensions found'}), {memory}, {facts.get('os')}, "
            f"Python {facts.get('python')}{clock}{temp}{free}")
    if facts.get("emulated"):
        head += f"; EMULATED ({facts['emulated']}): its times are not a latency"
    mods = facts.get("modules") or {}
    return head + "\n  runtimes: " + ", ".join(f"{m} {'yes' if ok else 'no'}" for m, ok in mods.items())


def lacking(facts: dict) -> list[str]:
    """What the device child cannot run without, missing there."""
    out = [f"{m} (the device's Python cannot import it)" for m in NEEDS if not (facts.get("modules") or {}).get(m)]
    version = tuple(int(p) for p in str(facts.get("python", "0.0")).split(".")[:2])
    if version < MIN_PYTHON:
        out.append(f"Python {'.'.join(map(str, MIN_PYTHON))} or newer (it has {facts.get('python')})")
    return out
