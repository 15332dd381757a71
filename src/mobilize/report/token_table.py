"""The results table of the ``generation`` task (causal-LM decoders), as columns the terminal and report.html both
read: one cell function per column, so the two views print the same figures.  Time is per decoded token (the
report's ``unit`` is ``token``); each variant's ``tokens`` holds its decode, prefill, perplexity and agreement.

    >>> v = {"name": "onnx-int4", "outcome": "OK", "format": "onnx", "runtime": "onnxruntime",
    ...      "latency_ms_p50": 0.84, "size_bytes": 9_800_000, "verdict": {"rule": "budget-ppl-increase"},
    ...      "tokens": {"engine": "onnxruntime", "weights": "int4", "decode_tokens_per_s": 1190.0,
    ...                 "ttft_ms_p50": 3.1, "ppl_increase_percent": 0.42, "ppl_increase_percent_low": 0.1,
    ...                 "ppl_increase_percent_high": 0.8, "top1_agreement": 0.973,
    ...                 "continuation_match_tokens": [32, 30, 32, 32], "continuation_tokens": 32}}
    >>> [c.cell(v) for c in COLUMNS if c.head in ("tok/s", "ppl +% (95% CI)", "cont.")]
    ['1190', '+0.42 [+0.1,+0.8]', '30/32']
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from mobilize.core.errors import clip
from mobilize.report.terminal import _fmt, _headline, speed_text


def tokens(v: dict[str, Any]) -> dict[str, Any]:
    """The variant's token figures (empty for a variant not built)."""
    return v.get("tokens") or {}


def ppl_text(v: dict[str, Any]) -> str:
    """The perplexity increase over the float model with its 95% interval: ``+0.42 [+0.1,+0.8]``."""
    t = tokens(v)
    if t.get("ppl_increase_percent") is None:
        return "-"
    low, high = t.get("ppl_increase_percent_low"), t.get("ppl_increase_percent_high")
    ci = f" [{_percent(low, 1)},{_percent(high, 1)}]" if low is not None and high is not None else ""
    return f"{_percent(t['ppl_increase_percent'], 2)}{ci}"


def _percent(value: float, digits: int) -> str:
    """A signed percentage in a narrow column: fewer decimals as it grows (+0.42, +12.4, +310)."""
    digits = digits if abs(value) < 10 else min(digits, 1) if abs(value) < 100 else 0
    return f"{value if round(value, digits) else 0.0:+.{digits}f}"  # no -0.0


def continuation_text(v: dict[str, Any]) -> str:
    """Greedy tokens matching the float model's before the first difference, the fewest over the prompts, out of
    each continuation's length: ``30/32``."""
    t = tokens(v)
    matched = t.get("continuation_match_tokens")
    if not matched:
        return "-"
    length = t.get("continuation_tokens")
    return f"{min(matched)}/{length}" if length is not None else str(min(matched))


def bound_text(v: dict[str, Any]) -> str:
    """Decode tokens/s as a share of the memory-bandwidth bound; ``cache`` for a file whose bytes read per token
    are served from a cache, as measured (``cache_rule``: no DRAM bound)."""
    t = tokens(v)
    if t.get("cache_resident"):
        return "cache"
    return _fmt(t.get("percent_of_bound"), ".0f")


def engine_text(v: dict[str, Any]) -> str:
    """``onnxruntime/onnx``: the engine and its file format (once where they share a name)."""
    engine, fmt = tokens(v).get("engine") or v.get("runtime") or "-", v.get("format") or "-"
    return engine if fmt == engine else f"{engine}/{fmt}"


def size_mb(v: dict[str, Any]) -> float | None:
    return v["size_bytes"] / 1e6 if v.get("size_bytes") else None


def ms_per_token(v: dict[str, Any]) -> float | None:
    """The decode time per token: the variant's timed unit (its p50), else its ``tokens`` figure."""
    value = v.get("latency_ms_p50")
    return tokens(v).get("decode_ms_per_token_p50") if value is None else value


def agreement_text(v: dict[str, Any]) -> str:
    share = tokens(v).get("top1_agreement")
    return _fmt(None if share is None else 100 * share, ".1f")


@dataclasses.dataclass(frozen=True)
class Column:
    head: str
    width: int
    cell: Callable[[dict[str, Any]], str]
    left: bool = False
    terminal: bool = True
    """Shown in the terminal table (report.html shows every column)."""
    title: str = ""
    """What the column is, as report.html's heading tooltip."""


COLUMNS: tuple[Column, ...] = (
    Column("variant", 22, lambda v: v["name"], left=True),
    Column("outcome", 11, lambda v: v["outcome"], left=True),
    Column("engine/format", 22, engine_text, left=True),
    Column("weights", 7, lambda v: tokens(v).get("weights") or "-", left=True),
    Column("tok/s", 7, lambda v: _fmt(tokens(v).get("decode_tokens_per_s"), ".0f"),
           title="decoded tokens per second (p50)"),
    Column("%bound", 6, bound_text, title="tokens/s over the memory-bandwidth bound"),
    Column("ms/tok", 8, lambda v: _fmt(ms_per_token(v), ".3f"), title="decode time per token, p50"),
    Column("p90 ms/tok", 10, lambda v: _fmt(tokens(v).get("decode_ms_per_token_p90") or v.get("latency_ms_p90"),
                                            ".3f"), terminal=False, title="decode time per token, p90"),
    Column("TTFT ms", 8, lambda v: _fmt(tokens(v).get("ttft_ms_p50"), ".2f"),
           title="time to first token: the prefill of the prompt, p50"),
    Column("speedup", 8, speed_text, title="decode time per token vs the reference"),
    Column("size MB", 8, lambda v: _fmt(size_mb(v), ".2f")),
    Column("+mem MB", 7, lambda v: _fmt(tokens(v).get("footprint_mb"), ".0f"),
           title="the file's memory beyond its runtime: peak RSS of a process holding only that runtime and the "
                 "file, less the runtime's bare baseline"),
    Column("check MB", 8, lambda v: _fmt(tokens(v).get("check_peak_rss_mb"), ".0f"), terminal=False,
           title="peak memory of the checking process (torch and the float model's answers in it too)"),
    Column("ppl +% (95% CI)", 19, ppl_text, title="perplexity increase vs the float model on the held-out text"),
    Column("agree %", 7, agreement_text, title="teacher-forced next-token agreement with the float model"),
    Column("cont.", 7, continuation_text,
           title="greedy tokens matching the float model's before the first difference (fewest over the prompts)"),
    Column("cache dB", 8, lambda v: _fmt(tokens(v).get("cache_sqnr_db"), ".1f"), terminal=False,
           title="the file's decode steps vs its own prefill of the same positions (SQNR)"),
    Column("logits dB", 9, lambda v: _fmt(tokens(v).get("logits_sqnr_db"), ".1f"), terminal=False,
           title="a float file's teacher-forced logits vs the float model's (SQNR)"),
    Column("rule", 20, lambda v: (v.get("verdict") or {}).get("rule") or "-", left=True),
)
"""The decoder table's columns in order; the terminal adds the notes column after ``rule``."""


def ordered(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fastest per token first; the variants without a time after, in the plan's order."""
    timed = sorted((v for v in variants if ms_per_token(v)), key=ms_per_token)
    return timed + [v for v in variants if not ms_per_token(v)]


def format_token_table(report: dict[str, Any], note_width: int = 56) -> str:
    """The terminal table of a ``generation`` report, with its legend."""
    shown = [c for c in COLUMNS if c.terminal]

    def line(texts: list[str]) -> str:
        return " ".join(f"{t:<{c.width}}" if c.left else f"{t:>{c.width}}" for c, t in zip(shown, texts))

    header = line([c.head for c in shown]) + "  notes"
    rows = [line([c.cell(v) for c in shown]) + f"  {clip(_headline(v), note_width)}"
            for v in ordered(report["variants"])]
    return "\n".join([header, "-" * len(header), *rows, "", *legend_lines(report)])


def legend_lines(report: dict[str, Any]) -> list[str]:
    """What each column of the decoder table is (the terminal prints them under it, report.html beside it)."""
    gen = report.get("generation") or {}
    band = gen.get("bandwidth") or {}
    bw, threads, samples = band.get("gb_per_s"), band.get("threads", 1), band.get("samples") or []
    when = (f"the median of {len(samples)} readings, one after each timed round ({min(samples):.1f}-"
            f"{max(samples):.1f})" if samples else "read once before the builds")
    bound = (f"the bytes one token reads (weights at the file's width, one embedding row, a tied table once) at "
             f"{bw:.1f} GB/s, the memory bandwidth measured in this run on {threads} thread(s), {when}; cache: those "
             f"bytes read at least 1.5x faster than DRAM when read alone (measured, not the cache size the machine "
             f"reports), no DRAM bound" if bw else "no bandwidth was measured")
    prompts = gen.get("continuations")
    return [
        f"tok/s, ms/tok: decode with the KV cache, ms per decoded token (p50), the same token ids in every runtime; "
        f"TTFT ms: time to first token, the prefill of a {gen.get('prompt_tokens', '?')}-token prompt to its last position's logits (each file's notes say how its engine gets there); "
        f"%bound: tok/s over the bandwidth bound ({bound})",
        f"~ : inside the 95% interval of no difference (a tie, not a win or a loss); speed-up: decode time per token "
        f"vs {report.get('reference_variant')}; +mem MB: the file's memory beyond its runtime - the peak RSS of a "
        f"fresh process that imports only the runtime, loads the file and decodes a few tokens, less that runtime's "
        f"bare baseline (report.json tokens.footprint_mb, baseline_mb)",
        f"ppl +%: perplexity increase vs the float model on {gen.get('held_out') or 'the held-out text'}, its 95% "
        f"CI a paired bootstrap over sequences; agree %: teacher-forced next-token agreement; cont.: greedy tokens "
        f"matching the float model's before the first difference, the fewest over {prompts or 'the'} prompts / "
        f"tokens per continuation; rules: see report.json verdicts",
    ]


def pick_figures(report: dict[str, Any], best: dict[str, Any]) -> tuple[str, str, str]:
    """The recommended decoder's time, speed-up and perplexity change for the ``recommended:`` line."""
    rate = tokens(best).get("decode_tokens_per_s")
    at = f"{_fmt(ms_per_token(best), '.3f')} ms/token p50" + (f" ({rate:.0f} tokens/s)" if rate else "")
    speed = f", {speed_text(best)} vs {report.get('reference_variant')}" if best.get("speedup") else ""
    ppl = tokens(best).get("ppl_increase_percent")
    return at, speed, "" if ppl is None else f", perplexity {ppl:+.2f}%"
