"""The decoder report (task ``generation``) through the one report path: the terminal table's decoder columns,
report.html's tables (a row per file with its TTFT and memory) and its tokens/s vs perplexity chart, checked in a
real browser (Debian's chromium, headless): it renders, both axes carry tick numbers, no two labels overlap."""

from __future__ import annotations

from mobilize.report.terminal import format_table, summary_lines

HELD_OUT = "16 x 128 tokens of the tiny_lm corpus (held-out split)"


def _tokens(engine: str, weights: str, ms: float, ttft: float, ppl: float, ci: float, agree: float,
            matched: list[int], peak: float, bound: float | None = None) -> dict:
    """A variant's ``tokens`` as compare writes it (decode per token, prefill, perplexity, agreement)."""
    return {"engine": engine, "weights": weights, "how": f"{engine}'s own generation stack",
            "ttft_ms_p50": ttft, "ttft_ms_rounds": [ttft * 0.98, ttft, ttft * 1.05],
            "decode_ms_per_token_p50": ms, "decode_ms_per_token_p90": ms * 1.08, "decode_tokens_per_s": 1000.0 / ms,
            "bound_tokens_per_s": None if bound is None else 1000.0 / ms / bound * 100,
            "percent_of_bound": bound, "cache_resident": bound is None, "ppl_reference": 12.31,
            "ppl_candidate": 12.31 * (1 + ppl / 100), "ppl_increase_percent": ppl,
            "ppl_increase_percent_low": ppl - ci, "ppl_increase_percent_high": ppl + ci, "top1_agreement": agree,
            "continuation_match_tokens": matched, "continuation_tokens": 32, "cache_sqnr_db": 61.0 if weights == "fp32"
            else 28.5, "logits_sqnr_db": 118.0 if weights == "fp32" else None, "check_peak_rss_mb": peak}


def _variant(name: str, outcome: str, fmt: str, runtime: str, size_mb: float | None, tokens: dict | None,
             speedup: tuple[float, float, float] | None, rule: str, reason: str, notes: list[str] = ()) -> dict:
    ms = tokens["decode_ms_per_token_p50"] if tokens else None
    return {
        "name": name, "outcome": outcome, "stage": "export" if outcome == "EXPORT_FAIL" else None,
        "notes": list(notes), "artifact": f"artifacts/{name}/model.{fmt}" if tokens else None, "format": fmt,
        "runtime": runtime, "kind": "float" if name.endswith("fp32") else "quantized",
        "size_bytes": int(size_mb * 1e6) if size_mb else None,
        "verdict": None if tokens is None else {"ok": outcome == "OK", "outcome": outcome, "rule": rule,
                                                 "reason": reason, "numbers": {}, "fidelity": None, "quality": None,
                                                 "reference_warning": None},
        "latency_ms_p50": ms, "latency_ms_p90": ms and ms * 1.08,
        "latency_ms_round_medians": [ms * 0.99, ms, ms * 1.02] if ms else [],
        "speedup": None if speedup is None else {"ratio": speedup[0], "low": speedup[1], "high": speedup[2],
                                                 "reference": "eager-fp32",
                                                 "significant": not speedup[1] <= 1.0 <= speedup[2]},
        "peak_rss_mb": tokens and tokens["check_peak_rss_mb"] * 0.8, "details": {}, "tokens": tokens,
    }


def decoder_report() -> dict:
    """A compare report of nine decoder files: OK ones (float and quantized), one over the perplexity budget, one
    MISMATCH (its KV cache), one EXPORT_FAIL (no file, ``tokens`` null); speed-ups with their intervals, one a
    tie."""
    ok = "perplexity {:.3g} vs 12.3 float ({:+.2f}%, 95% CI ...), next-token agreement {:.1f}% (rule {})"
    v = [
        _variant("eager-fp32", "OK", "eager", "torch", 33.1, _tokens("eager", "fp32", 4.10, 21.0, 0.0, 0.0, 1.0,
                 [32, 32, 32, 32], 612.0, 61.0), (1.0, 1.0, 1.0), "float-sqnr", ok.format(12.31, 0, 100, "float-sqnr")),
        _variant("eager-int8wo", "OK", "eager", "torch", 9.2, _tokens("eager", "int8", 3.05, 19.5, 0.35, 0.2, 0.981,
                 [32, 27, 32, 30], 530.0, 55.0), (1.34, 1.25, 1.44), "budget-ppl-increase",
                 ok.format(12.35, 0.35, 98.1, "budget-ppl-increase")),
        _variant("executorch-fp32", "OK", "pte", "executorch", 33.0, _tokens("executorch", "fp32", 2.52, 9.8, 0.0,
                 0.0, 1.0, [32, 32, 32, 32], 301.0, 88.0), (1.63, 1.55, 1.71), "float-sqnr",
                 ok.format(12.31, 0, 100, "float-sqnr"), ["executorch: custom SDPA and KV-cache ops"]),
        _variant("executorch-8da4w", "OK", "pte", "executorch", 6.1, _tokens("executorch", "int4", 0.61, 4.2, 1.92,
                 0.6, 0.942, [18, 32, 25, 32], 240.0), (6.72, 6.30, 7.15), "budget-ppl-increase",
                 ok.format(12.55, 1.92, 94.2, "budget-ppl-increase")),
        _variant("onnx-fp32", "OK", "onnx", "onnxruntime", 33.2, _tokens("onnxruntime", "fp32", 2.49, 8.7, 0.0, 0.0,
                 1.0, [32, 32, 32, 32], 402.0, 89.0), (1.65, 1.58, 1.73), "float-sqnr",
                 ok.format(12.31, 0, 100, "float-sqnr")),
        _variant("onnx-int4", "OK", "onnx", "onnxruntime", 6.4, _tokens("onnxruntime", "int4", 0.63, 4.0, 2.10, 0.7,
                 0.939, [20, 32, 22, 31], 251.0), (6.50, 5.90, 7.10), "budget-ppl-increase",
                 ok.format(12.57, 2.10, 93.9, "budget-ppl-increase")),
        _variant("openvino-int8", "OVER_BUDGET", "xml", "openvino", 9.0, _tokens("openvino", "int8", 0.62, 5.1, 7.80,
                 1.9, 0.874, [6, 11, 3, 32], 388.0), (6.61, 0.95, 12.2), "budget-ppl-increase",
                 "perplexity 13.3 vs 12.3 float (+7.80%): over the 5% budget (rule budget-ppl-increase)",
                 ["OVER_BUDGET: perplexity +7.80% over the 5% budget"]),
        _variant("openvino-int4", "MISMATCH", "xml", "openvino", 6.0, _tokens("openvino", "int4", 0.58, 3.9, 310.0,
                 40.0, 0.12, [0, 1, 0, 0], 377.0), None, "cache-consistency",
                 "the file's decode steps give 3.1 dB against its own prefill of the same positions, below 20 dB: its "
                 "KV cache is wrong (rule cache-consistency)", ["MISMATCH: its KV cache is wrong"]),
        _variant("litert-int4", "EXPORT_FAIL", "tflite", "litert", None, None, None, "-", "",
                 ["export: litert-torch's generative path needs a model with a registered builder"]),
    ]
    return {
        "model": "zoo:tiny_lm", "plan": "generation", "data": None, "threads": 2, "rounds": 5, "iterations": 32,
        "complete": True, "unit": "token", "reference_variant": "eager-fp32", "policy": {"max_ppl_increase_percent": 5.0},
        "recommended": {"name": "executorch-8da4w", "tied": ["onnx-int4"], "verdict": "", "unit": "token",
                        "picked_on": "token", "scope": {"text": "this ranking holds for this CPU: AMD EPYC"},
                        "reason": "fastest OK variant at 0.61 ms p50, but after 12 paired rounds (14 s) still within "
                                  "noise of onnx-int4 (executorch-8da4w is 1.03x as fast as onnx-int4, 99.24% CI "
                                  "0.98-1.09 includes 1, the level of the race's last look): a tie [rule race-tie]; "
                                  "timed on decode time per token; this ranking holds for this CPU: AMD EPYC"},
        "racing": None, "machine_load": {"busy": False}, "host_cpu": {"model": "AMD EPYC 9R14"},
        "stage_seconds": {"total": 171.0, "reference": 6.2, "lint": None, "export": {"onnx-int4": 21.0,
                          "executorch-8da4w": 48.5}, "load_accuracy": {"onnx-int4": 7.1, "executorch-8da4w": 9.4},
                          "profile": {}, "timer_start": {}, "timed_rounds": 31.0},
        "notes": ["tokenizer: the model folder's own (4096 ids)"], "reference_warning": None,
        "task": {"name": "generation", "given": False, "why": "a causal LM (zoo:tiny_lm)", "reading": None,
                 "text": "task: generation (guessed: a causal LM; --task to override)"},
        "generation": {"held_out": HELD_OUT, "parameters": 8_300_000, "vocab_size": 4096, "prompt_tokens": 32,
                       "gen_tokens": 32, "eval_sequences": 16, "eval_tokens": 128, "continuations": 4, "max_len": 161,
                       "bandwidth": {"gb_per_s": 14.2}},
        "variants": v,
    }


def test_the_terminal_table_has_the_decoder_columns_and_figures():
    report = decoder_report()
    lines = format_table(report).splitlines()
    for head in ("engine/format", "weights", "tok/s", "ms/tok", "TTFT ms", "speedup", "size MB", "peak MB",
                 "ppl +% (95% CI)", "agree %", "cont.", "rule", "notes"):
        assert head in lines[0], head
    rows = {line.split()[0]: line for line in lines[2:11]}
    fast = rows["executorch-8da4w"]
    for cell in ("executorch/pte", "int4", "1639", "0.610", "4.20", "6.72x", "6.10", "240", "+1.92 [+1.3,+2.5]",
                 "94.2", "18/32", "budget-ppl-increase"):
        assert cell in fast, (cell, fast)
    assert "0.95" not in rows["openvino-int8"] and "6.61x~" in rows["openvino-int8"]  # a tie: inside its interval
    assert " cache " in rows["executorch-8da4w"] and " 89 " in rows["onnx-fp32"]  # %bound, or cache-resident
    assert "+310 [+270,+350]" in rows["openvino-int4"]  # a broken file's figures still fit the column
    failed = rows["litert-int4"]
    assert "EXPORT_FAIL" in failed and "litert/tflite" in failed and "generative path" in failed
    text = "\n".join(lines)
    assert HELD_OUT in text and "32-token prompt" in text and "same token ids in every runtime" in text
    assert "14.2 GB/s" in text


def test_the_timed_files_come_fastest_first_and_failures_last():
    names = [line.split()[0] for line in format_table(decoder_report()).splitlines()[2:11]]
    assert names[:2] == ["openvino-int4", "executorch-8da4w"]  # by time per token, as every task's table
    assert names[-2:] == ["eager-fp32", "litert-int4"]


def test_the_pick_is_said_per_token_with_its_perplexity_and_the_whole_why():
    report = decoder_report()
    lines = summary_lines(report)
    assert lines[0] == ("recommended (tie): executorch-8da4w at 0.610 ms/token p50 (1639 tokens/s), 6.72x vs "
                        "eager-fp32, perplexity +1.92%")
    assert lines[1] == f"  why: {report['recommended']['reason']}"  # whole, colons and all
    assert "task: generation" in lines[2] and any(line.startswith("time: ") for line in lines)
