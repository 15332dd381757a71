"""Which decoder file to ship: the race's leader on decode time per token among the files within the perplexity
budget (OK), with the rule that decided and the unit it was picked on.

    >>> recommend_decoder({}, None) is None
    True
"""

from __future__ import annotations

from typing import Any

from mobilize.core.outcome import Outcome


def recommend_decoder(results: dict[str, Any], timing: dict[str, Any] | None) -> dict[str, Any] | None:
    from mobilize.bench.racing import RaceRecord, geometric_mean

    ok = {n: r for n, r in results.items() if r.outcome == Outcome.OK and r.timing.get("decode_round_medians_ms")}
    if not ok or timing is None:
        return None
    race = timing.get("racing") or {}
    leader = race.get("leader") if race.get("leader") in ok else min(
        ok, key=lambda n: geometric_mean(ok[n].timing["decode_round_medians_ms"]))
    best = ok[leader].timing
    busy = bool((timing.get("machine_load") or {}).get("busy"))
    unit = "decode time per token (the same token ids fed to every file, with its KV cache)"
    rate = f"{best['decode_tokens_per_s']:.0f} tokens/s ({best['decode_ms_per_token_p50']:.3f} ms/token p50)"
    speed = best.get("decode_speedup")
    versus = (f"; {speed['ratio']:.2f}x the decode rate of {speed['reference']} (95% CI {speed['low']:.2f}-"
              f"{speed['high']:.2f})" if speed and leader != speed["reference"] else "")
    if busy:
        rule, why = "race-busy-machine", "the machine was busy during the rounds: no file is claimed separated"
    elif race.get("stopped") == "separated":
        rule, why = "race-separated", "separated from every other OK file"
    elif race.get("stopped") == "time-budget" and len(race.get("contenders", [])) > 1:
        rule, why = "race-tie", f"still within noise of {', '.join(n for n in race['contenders'] if n != leader)}"
    else:
        rule, why = "race-separated", "the only OK file timed" if len(ok) == 1 else "fastest OK file"
    record = RaceRecord.summary_of(race) if race else ""
    return {"name": leader, "unit": unit, "tied": [n for n in race.get("contenders", []) if n != leader]
            if rule == "race-tie" else [],
            "reason": f"picked on {unit}: {leader} at {rate}{versus}; {why} [rule {rule}]; {record}".rstrip("; "),
            "rule": rule}
