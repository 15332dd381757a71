"""zoo:tiny_lm's decoder files beside the files the field's own one-line tools make from the same folder, timed in
one interleaved run per thread count (``mobilize compare``: the same prompt prefilled, the same token ids decoded
with each file's own KV cache, paired rounds), judged on the same held-out text.  The CPU is printed; the ratios
come from paired round medians of one run (95% t interval on their logs); inside the interval of 1.0 is a tie.

The peers' files are variants of the generation plan, built by the peers' own tools, unchanged:
- llama.cpp: ``convert_hf_to_gguf.py`` then its quantizer (``llama_model_quantize``, what ``llama-quantize``
  runs): ``llamacpp-f16``, ``-q8_0``, ``-q4_0``, ``-q4_k_m`` (scripts/setup-llamacpp.sh installs them);
- onnxruntime-genai's model builder (``python -m onnxruntime_genai.models.builder -p int4 -e cpu``), run by its
  Generator: ``onnx-genai-int4`` (its CPU default, int8 activations), ``onnx-genai-int4-fp32act``, ``onnx-genai-fp32``.
- optimum-executorch's ``optimum-cli export executorch`` (its README's flags: ``--recipe xnnpack --use_custom_sdpa
  --use_custom_kv_cache --qlinear 8da4w --qembedding 8w``): ``optimum-executorch-8da4w``, and optimum-intel's
  ``optimum-cli export openvino --task text-generation-with-past --weight-format int4``: ``optimum-intel-int4`` - each
  in its own venv (they pin other transformers versions), installed by ``bash scripts/setup-peers.sh``; without it
  they are left out, and the report's notes say so.

    .venv/bin/python benchmarks/llm.py [--threads 1 2] [--rounds 7] [--prompt 128] [--gen 128] [--budget 1.0]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEERS = ("llamacpp-", "onnx-genai-", "optimum-")
"""Variant name prefixes of the files the peers' own tools build."""
SAME_ENGINE = (("executorch-8da4w", "optimum-executorch-8da4w"), ("openvino-int4", "optimum-intel-int4"))
"""mobilize's own int4 file and the one the same engine's peer CLI builds."""


def run(threads: int, args: argparse.Namespace, out: Path) -> dict:
    argv = [sys.executable, "-m", "mobilize", "compare", "zoo:tiny_lm", "--threads", str(threads), "--prompt-len",
            str(args.prompt), "--gen-len", str(args.gen), "--rounds", str(args.rounds), "--max-ppl-increase",
            str(args.budget), "-o", str(out)]
    t0 = time.time()
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"llm.py: compare failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report = json.loads((out / "report.json").read_text())
    report["_wall_s"] = time.time() - t0
    return report


def ratio(report: dict, a: str, b: str) -> str:
    """a's decode time per token over b's, from the paired round medians (>1: a is slower)."""
    from mobilize.accuracy.stats import ratio_ci

    v = {x["name"]: x for x in report["variants"]}
    if a not in v or b not in v or not v[a].get("latency_ms_round_medians") or not v[b].get("latency_ms_round_medians"):
        return f"{a} / {b}: not both timed"
    ra, rb = v[a]["latency_ms_round_medians"], v[b]["latency_ms_round_medians"]
    n = min(len(ra), len(rb))  # the rounds both ran (a raced variant runs more)
    ci = ratio_ci(ra[:n], rb[:n])
    tie = ci.low <= 1.0 <= ci.high
    return (f"{a} / {b}: {ci.ratio:.2f}x per token (95% CI {ci.low:.2f}-{ci.high:.2f}, {n} paired rounds)"
            f"{', a tie' if tie else ''}")


def table(report: dict) -> None:
    print(f"{'file':<26} {'outcome':<11} {'MB':>6} {'ms/tok':>7} {'tok/s':>7} {'TTFT ms':>8} {'read/tok MB':>11} "
          f"{'bound':>9} {'ppl +%':>7} {'agree%':>6} {'RSS MB':>7}")
    for v in report["variants"]:
        t = v.get("tokens") or {}
        bound = ("cache" if t.get("cache_resident") else
                 f"{t['percent_of_bound']:.0f}%" if t.get("percent_of_bound") else "-")
        cells = [f"{(v.get('size_bytes') or 0) / 1e6:6.2f}",
                 f"{t['decode_ms_per_token_p50']:7.3f}" if t.get("decode_ms_per_token_p50") else f"{'-':>7}",
                 f"{t['decode_tokens_per_s']:7.0f}" if t.get("decode_tokens_per_s") else f"{'-':>7}",
                 f"{t['ttft_ms_p50']:8.2f}" if t.get("ttft_ms_p50") else f"{'-':>8}",
                 f"{t['bytes_per_token'] / 1e6:11.2f}" if t.get("bytes_per_token") else f"{'-':>11}",
                 f"{bound:>9}",
                 f"{t['ppl_increase_percent']:+7.2f}" if t.get("ppl_increase_percent") is not None else f"{'-':>7}",
                 f"{100 * t['top1_agreement']:6.1f}" if t.get("top1_agreement") is not None else f"{'-':>6}",
                 f"{t['check_peak_rss_mb']:7.0f}" if t.get("check_peak_rss_mb") else f"{'-':>7}"]
        print(f"{v['name']:<26} {v['outcome']:<11} {' '.join(cells)}")


def main() -> None:
    from mobilize.core.target import host_cpu

    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=127, help="prompt + gen + 1 must fit the model's 256 positions")
    ap.add_argument("--budget", type=float, default=1.0, help="perplexity budget, percent (compare's default)")
    args = ap.parse_args()
    cpu = host_cpu()
    flags = ", ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8") if f in cpu.flags)
    print(f"CPU: {cpu.model} ({flags}); {time.strftime('%Y-%m-%d')}; zoo:tiny_lm, prompt {args.prompt}, decode "
          f"{args.gen} tokens, {args.rounds} interleaved rounds, perplexity budget +{args.budget}%")
    work = Path(tempfile.mkdtemp(prefix="mobilize-llm-bench-"))
    for threads in args.threads:
        report = run(threads, args, work / f"t{threads}")
        print(f"\n== {threads} thread(s): one compare run, {report['_wall_s']:.0f} s (builds, checks, timing)")
        table(report)
        ok = [v for v in report["variants"] if v["outcome"] == "OK" and (v.get("tokens") or {}).get(
            "decode_ms_per_token_p50")]
        pick = (report.get("recommended") or {}).get("name")
        peers = sorted((v for v in ok if v["name"].startswith(PEERS) and v["name"] != pick),
                       key=lambda v: v["tokens"]["decode_ms_per_token_p50"])
        print(f"pick: {pick} ({(report.get('recommended') or {}).get('rule')}); against each peer file within the "
              f"budget, fastest first:")
        print("  " + ratio(report, "onnx-int4", "onnx-genai-int4") + "   [torch.onnx export vs the GenAI builder]")
        for own, peer in SAME_ENGINE:
            print("  " + ratio(report, own, peer) + "   [mobilize's file vs the same engine's peer CLI file]")
        for peer in peers:  # every peer file within the budget, fastest first
            print("  " + ratio(report, pick, peer["name"]))
        print(f"  report: {work / f't{threads}' / 'report.json'}")


if __name__ == "__main__":
    main()
