"""The terminal view of a lint report: findings grouped by rule, the targets table, the top of the profile.
"""

from __future__ import annotations

from mobilize.lint.report import LintReport, Severity
from mobilize.lint.support import Profile

SLOW_RATIO = 2.0
SLOW_SHARE = 0.02
"""A row is called slow for its MACs when its time share is SLOW_RATIO times its MAC share and at least SLOW_SHARE."""


def format_report(report: LintReport, top: int = 15) -> str:
    lines = [f"lint {report.model}: {report.summary().split('; targets:')[0]}"]
    if report.findings:
        lines.append("")
        lines.append("findings")
        for f in report.findings:
            mark = "!" if f.severity == Severity.WARN else "i"
            where = f.where + (f" [{f.location}]" if f.location else "")
            lines.append(f"  {mark} {f.rule:<16} {where}: {f.message}")
            lines.append(f"    fix: {f.fix}")
    if report.targets:
        lines += ["", "targets", f"  {'target':<12} {'status':<12} {'partitions':>10} {'ops taken':>12}  summary"]
        for t in report.targets:
            taken = (f"{t.ops_supported}/{t.ops_total}" if t.ops_total is not None and t.ops_supported is not None
                     else "-")
            parts = "-" if t.partitions is None else str(t.partitions)
            lines.append(f"  {t.target:<12} {t.status:<12} {parts:>10} {taken:>12}  {t.summary}")
            lines += [f"  {'':<12} note: {n}" for n in t.notes]
    if report.profile is not None:
        lines += ["", *format_profile(report.profile, top)]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def format_profile(profile: Profile, top: int = 15) -> list[str]:
    timed = profile.total_time_ms is not None
    lines = [f"per-layer profile: {profile.total_macs / 1e6:.1f}M MACs, {profile.total_params / 1e6:.2f}M parameters, "
             f"largest activation {profile.peak_activation_bytes / 1024:.0f} KiB, input "
             f"{' '.join('x'.join(map(str, s['shape'])) for s in profile.input_specs)}"
             + (f"; {profile.total_time_ms:.3f} ms per run measured on {profile.timed_on}" if timed else "")]
    head = f"  {'layer':<34} {'kind':<34} {'MACs':>9} {'share':>6} {'params':>8} {'act KiB':>8}"
    lines.append(head + (f" {'time ms':>8} {'t share':>7} {'t/MAC':>6}" if timed else ""))
    for row in profile.rows[:top]:
        text = (f"  {_cut(row.module, 34):<34} {_cut(row.kind, 34):<34} {_num(row.macs):>9} {row.mac_share:>6.1%} "
                f"{_num(row.params):>8} {row.activation_bytes / 1024:>8.1f}")
        if timed:
            ratio = row.slow_for_macs
            text += (f" {row.time_ms or 0:>8.3f} {row.time_share or 0:>7.1%} "
                     f"{(f'{ratio:.1f}x' if ratio is not None else '-'):>6}")
        lines.append(text)
    if len(profile.rows) > top:
        lines.append(f"  ... {len(profile.rows) - top} more rows (--top N, or --json for all)")
    slow = sorted((r for r in profile.rows if (r.slow_for_macs or 0) >= SLOW_RATIO and (r.time_share or 0) >= SLOW_SHARE),
                  key=lambda r: -(r.time_share or 0))
    if slow:
        lines.append(f"  slow for their MACs (time share >= {SLOW_RATIO:g}x MAC share): " + ", ".join(
            f"{r.module} {r.slow_for_macs:.1f}x ({r.time_share:.0%} of the time, {r.mac_share:.1%} of the MACs)"
            for r in slow[:5]))
    lines += [f"  note: {n}" for n in profile.notes]
    return lines


def _num(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
