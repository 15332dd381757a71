"""Which variant compare recommends: the race's leader (or the fastest OK variant when there was no race), a tie
when the time budget ran out with others still within noise, each with the reason a user reads; the reason names
the unit the pick was made on and the CPU it holds for (the instruction sets that decided the kernels).

    >>> from mobilize.core.target import CpuInfo
    >>> scope = pick_scope(CpuInfo("AMD EPYC 9R14", "x86_64", 2, ("avx2", "avx512f", "avx512_vnni", "avx512_bf16")))
    >>> scope["isa"]
    ['AVX2', 'AVX-512', 'VNNI', 'bf16']
    >>> print(scope["text"].split(";")[0] + ";" + scope["text"].split(";")[1])
    this ranking holds for this CPU: AMD EPYC 9R14 (x86_64; AVX2, AVX-512, VNNI, bf16)
"""

from __future__ import annotations

from typing import Any

from mobilize.accuracy.stats import ratio_ci
from mobilize.bench.racing import ESTIMATOR, RaceRecord, level_text, paired_leader
from mobilize.core.outcome import Outcome
from mobilize.core.target import VNNI_FLAGS
from mobilize.report.results import VariantResult


ISA_NAMES = (("AVX2", ("avx2",)), ("AVX-512", ("avx512f",)), ("VNNI", VNNI_FLAGS),
             ("bf16", ("avx512_bf16", "amx_bf16", "bf16")), ("AMX", ("amx_tile", "amx_int8", "amx_bf16")),
             ("NEON", ("asimd",)), ("dotprod", ("asimddp",)), ("i8mm", ("i8mm",)), ("SVE", ("sve",)))
"""The instruction sets that decide which kernels a runtime picks, by the CPU flags that announce them (VNNI: the
int8 dot products :attr:`mobilize.core.target.CpuInfo.has_vnni` counts, AMX's included)."""

UNIT_WHY = {"same-work": "timed on the same work for every file (float input to float answer, each file's own "
                         "conversions inside the timed call)",
            "file": "timed on each file alone (its input already in its own element type and layout; not the same "
                    "work where files convert differently)",
            "token": "picked on decode time per token: the same prompt and token ids fed to every file, each with "
                     "its own KV cache (the prompt's prefill, the time to the first token, timed apart)"}
UNIT_AT = {"token": lambda ms: f"{ms:.3f} ms/token p50 ({1000.0 / ms:,.0f} tokens/s)"}
"""How a pick's time reads in its unit (default: ``0.12 ms p50``)."""


def pick_scope(cpu: Any) -> dict[str, Any]:
    """The CPU a ranking holds for (a :class:`mobilize.core.target.CpuInfo`): its model and the instruction sets
    that decided the kernels, with the sentence the why line carries."""
    isa = [name for name, flags in ISA_NAMES if any(f in cpu.flags for f in flags)]
    text = (f"this ranking holds for this CPU: {cpu.model} ({cpu.arch}; {', '.join(isa) or 'no SIMD extensions found'})"
            f"; on another CPU (a phone's arm64 core, an AVX2-only x86) the files may rank differently: compare there")
    return {"cpu": cpu.model, "arch": cpu.arch, "isa": isa, "text": text}


def recommend(results: list[VariantResult], race: RaceRecord | None, load: Any = None, *, cpu: Any = None,
              unit: str = "same-work", frames: str | None = None) -> dict[str, Any] | None:
    """The pick (:func:`_pick`), its reason followed by the unit it was picked on and the CPU it holds for
    (``cpu``: a :class:`mobilize.core.target.CpuInfo`, this machine's when None).  ``frames``: the label of
    ``--frames`` (``frame to answer, nv21 1920x1080``): the pick is made on each file's frame-to-answer figures."""
    from mobilize.core.target import host_cpu

    picked = _pick([on_frames(r) for r in results] if frames else results, race, load, UNIT_AT.get(unit))
    if picked is None:
        return None
    scope = pick_scope(cpu or host_cpu())
    why = (f"picked on {frames} ({FRAMES_WHY})" if frames else UNIT_WHY.get(unit, unit))
    picked["reason"] += f"; {why}; {scope['text']}"
    return {**picked, "unit": unit, "picked_on": frames or unit, "scope": scope}


FRAMES_WHY = ("each file's camera frame converted to its own input, inference and the top-5 answer, conversion "
              "included, timed in the same interleaved rounds and race")


def on_frames(r: VariantResult) -> VariantResult:
    """``r`` with its frame-to-answer figures where the pick reads its timed unit's (round medians and p50)."""
    import dataclasses

    f = r.frames or {}
    return dataclasses.replace(r, latency={"latency_ms_p50": f.get("latency_ms_p50")},
                               latency_ms_round_medians=list(f.get("latency_ms_round_medians") or []))


def _pick(results: list[VariantResult], race: RaceRecord | None, load: Any = None,
          at_text: Any = None) -> dict[str, Any] | None:
    """The race's leader (:mod:`mobilize.bench.racing`), or the OK variant the race would lead with when there was no
    race (:func:`mobilize.bench.racing.paired_leader`); the candidates still within noise when the time budget ran out make
    a tie (all named); a separated leader is explained by the last variant it raced itself.  Every ratio and
    interval here is the race's one estimator.  ``load``: how busy the machine was during the rounds
    (:class:`mobilize.bench.load.MachineLoad`); a busy machine gets no separation claim (rule race-busy-machine)."""
    ok = {r.name: r for r in results if r.outcome == Outcome.OK and r.latency_ms_round_medians}
    if not ok:
        return None
    leader = race.leader if race is not None and race.leader in ok else None
    best = ok[leader or paired_leader(list(ok), {n: r.latency_ms_round_medians for n, r in ok.items()})]
    tied = [n for n in (race.tied if race is not None else []) if n in ok]
    others = {n: ratio_ci(r.latency_ms_round_medians, best.latency_ms_round_medians)
              for n, r in ok.items() if n != best.name}
    budget = (best.verdict or {}).get("reason", "")
    rounds = len(best.latency_ms_round_medians)
    at = ((at_text or (lambda ms: f"{ms:.2f} ms p50"))(best.latency_ms_p50) if best.latency_ms_p50 else "no p50")
    raced = f"after {rounds} paired rounds" + (f" ({race.spent()})" if race is not None else "")
    if load is not None and load.busy and not tied and others:
        rule = "race-busy-machine"
        reason = (f"fastest OK variant at {at} in these rounds, but the machine was busy ({load.text()}): no variant "
                  f"is claimed separated; rerun on a quiet machine [rule race-busy-machine]")
    elif tied:  # judged as the race's last look judged it: at that look's corrected level
        rule = "race-tie"
        first = ratio_ci(ok[tied[0]].latency_ms_round_medians, best.latency_ms_round_medians, race.last_level)
        reason = (f"fastest OK variant at {at}, but {raced} still within noise of {', '.join(tied)} "
                  f"({best.name} is {first.ratio:.2f}x as fast as {tied[0]}, {level_text(race.last_level)} CI "
                  f"{first.low:.2f}-{first.high:.2f} includes 1, the level of the race's last look{first.outlier_text()}"
                  f"): a tie [rule race-tie]")
    elif race is not None and (last := _last_separated(race, best.name)) is not None:
        rule = "race-separated"
        earlier = [d.name for d in race.dropped if d.rule == "race-separated" and d is not last]
        reason = (f"fastest OK variant at {at}; {last.ratio:.2f}x as fast as {last.name}, the closest variant it "
                  f"raced to the end ({level_text(last.level or 0.95)} CI {last.low:.2f}-{last.high:.2f} at that "
                  f"look, {last.after_round} paired rounds{_outliers_text(last.outlier_rounds)}) "
                  f"[rule race-separated]")
        if earlier:
            reason += (f"; {len(earlier)} other(s) dropped as slower beyond noise than the leader of their round "
                       f"(report.json racing.dropped)")
    elif others:
        rule = "race-separated"
        name, ci = min(others.items(), key=lambda kv: kv[1].ratio)
        reason = (f"fastest OK variant at {at}; {ci.ratio:.2f}x as fast as the next, {name} (95% CI "
                  f"{ci.low:.2f}-{ci.high:.2f}, {ci.rounds} paired rounds{ci.outlier_text()}) [rule race-separated]")
    else:
        rule, reason = "race-only-one", f"the only OK variant timed ({at}) [rule race-only-one]"
    return {"name": best.name, "reason": reason, "rule": rule, "tied": tied, "verdict": budget,
            "busy_machine": bool(load is not None and load.busy),
            "estimator": race.estimator if race is not None else ESTIMATOR}


def _outliers_text(rounds: list[dict[str, Any]]) -> str:
    """A dropped variant's left-out rounds (report.json ``racing.dropped[].outlier_rounds``) as the estimator names
    them."""
    from mobilize.accuracy.stats import RatioCI

    return RatioCI(1.0, 1.0, 1.0, 0, tuple((o["round"], o["ratio"]) for o in rounds or [])).outlier_text()


def _last_separated(race: RaceRecord, leader: str):
    """The race's decisive comparison: the last variant dropped as slower beyond noise than ``leader`` itself
    (of several dropped in that round, the closest).
    Comparing the leader with every other OK variant over all their rounds would mix in variants dropped
    early against another leader, over the few rounds they shared (seen: "0.97x as fast as the next ... 5
    paired rounds" under a race-separated verdict)."""
    mine = [d for d in race.dropped if d.rule == "race-separated" and d.against == leader and d.ratio is not None]
    return max(mine, key=lambda d: (d.after_round, -d.ratio)) if mine else None


def pick_caveats(picked: VariantResult, task: dict[str, Any], data: str | None) -> dict[str, Any]:
    """What the recommendation's own lines must say its pick was not checked on (issue #67): ``inputs`` when there
    was no ``--data`` (an int8 file was recommended on random inputs with the only word of it in a per-row note the
    terminal cut short), ``unchecked`` when a quantized or changed file was picked under a guessed ``raw`` task
    (no task measure judged it: a segmentation net's int8 file once lost 15.5 mask-IoU points unseen).

    >>> from mobilize.report.results import VariantResult
    >>> int8 = VariantResult("onnx-int8", kind="quantized", notes=["data: no data source: using 8 seeded random inputs"])
    >>> out = pick_caveats(int8, {"name": "raw", "given": False, "why": "output shape (1,4,16,16)"}, None)
    >>> sorted(out), out["inputs"]["calibrated_on_random"]
    (['inputs', 'unchecked'], True)
    >>> pick_caveats(int8, {"name": "raw", "given": True}, "x.npz"), pick_caveats(int8, {"name": "generation"}, None)
    ({}, {})
    """
    out: dict[str, Any] = {}
    if not data and task.get("name") != "generation":  # a decoder's prompts are its own corpus, not random values
        calibrated = any(n.startswith("data: no data source") for n in picked.notes or [])
        out["inputs"] = {"source": "random-with-seed", "calibrated_on_random": calibrated,
                         "text": f"judged on seeded random inputs (no --data): {picked.name}'s verdict says how "
                                 f"closely it tracks the float model on random values, not on the inputs it will see"
                                 + (", and its int8 scales were calibrated on random values too" if calibrated else "")
                                 + "; give --data <samples> for a verdict on real ones"}
    if task.get("name") == "raw" and not task.get("given") and picked.kind in ("quantized", "changed"):
        out["unchecked"] = (f"the task was guessed raw ({task.get('why')}): {picked.name}, a {picked.kind} file, was "
                            f"judged by cosine and SQNR on the raw outputs only; no task measure (classes, masks, "
                            f"boxes, neighbours) was checked: --task classification|segmentation|detection|embedding "
                            f"judges it by one")
    return out
