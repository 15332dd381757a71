"""After the search: "why is int8 not faster" for the routes whose engine can say (``Backend.why_slow``), and
time-weighted profiles of the candidates within budget."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from mobilize.accuracy.verify import Kind
from mobilize.tune.candidates import Candidate
from mobilize.tune.routes import route
from mobilize.tune.search import Search


def diagnose(candidates: list[Candidate], search: Search, runtimes: Sequence[str],
             echo: Callable[[str], None]) -> list[dict[str, Any]]:
    """For int8 candidates timed no faster than their fp32 twin: where the time goes, where the files' engine has an
    analysis."""
    from mobilize.tune.why import why_not_faster

    out = []
    for r in (route(rt) for rt in dict.fromkeys(runtimes)):
        fp32 = next((c for c in candidates if c.name == r.fp32_twin and c.latency_ms_p50), None)
        slow = fp32 and next((c for c in candidates if c.runtime == r.runtime and c.kind == Kind.QUANTIZED
                              and c.latency_ms_p50 and c.latency_ms_p50 >= fp32.latency_ms_p50), None)
        if slow:  # one diagnosis per runtime: its int8 candidates share the cause
            d = why_not_faster(fp32.path, slow.path, search.samples[0])
            if d is None:
                continue
            for line in d.lines():
                echo(line)
            out.append({"candidate": slow.name, **d.to_json()})
    return out


def profiles(candidates: list[Candidate], search: Search, echo: Callable[[str], None]) -> dict[str, Any]:
    """Time-weighted profiles (ETDump, ONNX Runtime's profiler: every format a backend can profile) of the winner
    and every candidate within budget; a WARNING line when a few ops outside the delegate dominate one of them."""
    from mobilize.core.backend import format_for_suffix, profilable_formats
    from mobilize.profile import profile_file

    profilable = profilable_formats()
    out: dict[str, Any] = {}
    for c in candidates:
        if c.within_budget and c.path is not None and format_for_suffix(c.path.suffix) in profilable:
            profile = profile_file(c.path, search.samples[0])
            out[c.name] = profile.to_json()
            warning = profile.warning()
            if warning:
                echo(f"{c.name}: {warning}")
    return out
