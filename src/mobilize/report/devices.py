"""``compare --on``'s lines: one table of every file on every device side by side (p50 and the device's own
verdict), then each device's facts, what was pushed to it, its rounds' warnings and its pick.

    >>> report = {"timed_on_host": False, "variants": [{"name": "onnx-fp32", "outcome": "OK"}],
    ...           "devices": {"pi": {"emulated": None, "variants": {"onnx-fp32": {"outcome": "OK",
    ...               "latency": {"latency_ms_p50": 1.5}}}, "facts": None, "device": {"kind": "ssh"},
    ...               "pushed": {"files": 1, "bytes": 2048,
    ...               "already_there": 0}, "recommended": None}}}
    >>> print(device_lines(report)[1])
    onnx-fp32  1.500 ms OK
"""

from __future__ import annotations

from typing import Any


def _cell(row: dict[str, Any] | None, emulated: bool) -> str:
    if not row:
        return "-"
    outcome = row.get("outcome", "?")
    p50 = (row.get("latency") or row).get("latency_ms_p50")  # a device's row, or the host's variant
    if emulated and outcome not in ("UNSUPPORTED",):
        return f"{outcome} (emulated: not timed)"
    return f"{p50:.3f} ms {outcome}" if p50 is not None else outcome


def device_lines(report: dict[str, Any]) -> list[str]:
    devices = report.get("devices") or {}
    names = [v["name"] for v in report.get("variants", [])]
    columns = (["host"] if report.get("timed_on_host", True) else []) + list(devices)
    table = [["variant", *columns]]
    for v in report.get("variants", []):
        cells = []
        if report.get("timed_on_host", True):
            cells.append(_cell(v, False))
        for dev in devices.values():
            cells.append(_cell((dev.get("variants") or {}).get(v["name"]), bool(dev.get("emulated"))))
        table.append([v["name"], *cells])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    for name, dev in devices.items():
        lines += _device_notes(name, dev, names)
    return lines


def _device_notes(name: str, dev: dict[str, Any], names: list[str]) -> list[str]:
    out = []
    facts = dev.get("facts") or {}
    if facts:
        cpu = facts.get("cpu") or {}
        out.append(f"{name}: {facts.get('machine')}, {cpu.get('model')} x{facts.get('cores')}, {facts.get('os')}, "
                   f"Python {facts.get('python')}" + (f"; EMULATED: {dev['emulated']}" if dev.get("emulated") else ""))
    pushed = dev.get("pushed")
    if pushed and (dev.get("device") or {}).get("kind") == "ssh":  # the others read the files where they are
        out.append(f"{name}: pushed {pushed['files']} file(s), {pushed['bytes'] / 2**20:.1f} MB"
                   + (f"; {pushed['already_there']} already there (cache)" if pushed.get("already_there") else ""))
    hot = [r["round"] for r in dev.get("rounds") or [] if r.get("throttled")]
    if hot:
        out.append(f"{name}: WARNING the clock was throttled or the board hot in round(s) {hot}")
    load = dev.get("machine_load") or {}
    if load.get("busy"):
        out.append(f"{name}: WARNING the device was busy during the rounds (other processes "
                   f"{100 * load.get('others_cpu_share', 0):.0f}% of its cores): no separation is claimed")
    if dev.get("failure"):
        out.append(f"{name}: {dev['failure']}")
    for vname in names:
        row = (dev.get("variants") or {}).get(vname) or {}
        if row.get("reason") and row.get("outcome") not in ("OK", "UNSUPPORTED"):
            out.append(f"{name}: {vname}: {row['outcome']}: {row['reason']}")
    pick = dev.get("recommended")
    if pick:
        out.append(f"{name}: pick {pick['name']}: {pick['reason']}")
    elif not dev.get("emulated"):
        out.append(f"{name}: no pick (no file was timed OK on it)")
    return out


def devices_section(report: dict[str, Any]) -> str:
    """report.html's section for ``compare --on``: the same table and notes as the terminal's."""
    from mobilize.report.html_parts import esc

    devices = report.get("devices") or {}
    if not devices:
        return ""
    on_host = report.get("timed_on_host", True)
    head = "".join(f"<th>{esc(n)}</th>" for n in (["host"] if on_host else []) + list(devices))
    rows = []
    for v in report.get("variants", []):
        cells = ([_cell(v, False)] if on_host else []) + [
            _cell((dev.get("variants") or {}).get(v["name"]), bool(dev.get("emulated"))) for dev in devices.values()]
        rows.append(f'<tr><td>{esc(v["name"])}</td>' + "".join(f'<td class="l">{esc(c)}</td>' for c in cells)
                    + "</tr>")
    notes = [ln for name, dev in devices.items()
             for ln in _device_notes(name, dev, [v["name"] for v in report.get("variants", [])])]
    return ("<h2>Devices</h2><p class=\"muted\">Each file checked on the device's own kernels against the host's "
            "float reference and timed there with the host's round schedule (p50 ms and the device's verdict); an "
            "emulated device is checked, never timed.</p>"
            f"<table><tr><th>variant</th>{head}</tr>{''.join(rows)}</table>"
            + "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
