"""Decoders of a real phone-class size, where decode time is the weights streamed from memory: Qwen2.5-0.5B's
architecture (24 layers, hidden 896, 14 heads / 2 KV heads, vocabulary 151,936, tied embeddings; or, with
``--shape llama-3.2-1b``, Llama-3.2-1B's: 16 layers, hidden 2048, 32 / 8 heads, vocabulary 128,256) with random
weights, saved as a transformers folder with a small byte-level tokenizer, then ``mobilize compare`` on it with the
int4 files of each engine - llama.cpp's Q4_K_M and Q4_0 (its own converter and quantizer), onnxruntime-genai's
builder file, optimum-executorch's and optimum-intel's CLI files (scripts/setup-peers.sh; left out without it),
mobilize's ExecuTorch 8da4w, OpenVINO int4 (stateful, NNCF) and ONNX Runtime int4 - timed in one interleaved run.

Random weights: the verdicts judge nothing real (VACUOUS) and only the times count; quality is judged on the
trained zoo:tiny_lm (benchmarks/llm.py).  Each file's percentage of the DRAM bound is its tokens/s over the
memory bandwidth measured in the same run on the decode's threads divided by the bytes one token reads.

    .venv/bin/python benchmarks/llm_shapes.py [--shape qwen2.5-0.5b|llama-3.2-1b] [--threads 2] [--rounds 5]
        [--prompt 128] [--gen 64] [--variant NAME ...]
    .venv/bin/python benchmarks/llm_shapes.py --default-plan --prompt 128   # compare as a user runs it

With ``--default-plan`` compare gets the folder with no ``--variant``, ``--eval-len``, ``--rounds`` or ``--timeout``:
the plan a model of this size gets by default (``generation-large``), its wall time and phases printed.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0,
                  tie_word_embeddings=True, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1)
LLAMA32_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                  num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096, rope_theta=500000.0,
                  tie_word_embeddings=True, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1)
"""Llama-3.2-1B's architecture; its rope scaling left out and its context 4096 (131072 in the release: an fp32 KV
buffer sized for that, as ONNX Runtime GenAI's shared buffer is, would take 8.6 GB), neither of which changes the weights a
token reads."""
SHAPES = {"qwen2.5-0.5b": ("Qwen2.5-0.5B", "Qwen2Config", "Qwen2ForCausalLM", QWEN25_05B),
          "llama-3.2-1b": ("Llama-3.2-1B", "LlamaConfig", "LlamaForCausalLM", LLAMA32_1B)}
VARIANTS = ("eager-fp32", "executorch-8da4w", "onnx-int4", "onnx-genai-int4", "openvino-int4", "llamacpp-q4_0",
            "llamacpp-q4_k_m", "optimum-executorch-8da4w", "optimum-intel-int4")


def byte_tokenizer(folder: Path) -> None:
    """GPT-2's byte-level BPE over the 256 bytes and a few merges (llama.cpp's converter needs a tokenizer and
    libllama a merge list); the model's other ids have no text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        chars[byte] = chr(byte) if byte in printable else chr(256 + extra)
        extra += byte not in printable
    vocab = {chars[b]: b for b in range(256)}
    merges = [("t", "h"), ("e", "r"), ("i", "n")]
    vocab.update({a + b: 256 + i for i, (a, b) in enumerate(merges)})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))


def main() -> None:
    import torch
    import transformers

    from mobilize.core.target import host_cpu

    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--timeout", type=int, default=2400, help="compare's seconds per stage (a 1B file's build "
                    "and check take minutes each; the float reference took 652 s before it decoded with a cache)")
    ap.add_argument("--variant", action="append", help=f"default: {', '.join(VARIANTS)}")
    ap.add_argument("--default-plan", action="store_true",
                    help="compare as a user runs it: no --variant, --eval-len, --rounds or --timeout (the plan a "
                         "model of this size gets, the default held-out window and stage limit); --prompt "
                         "and --threads still apply")
    args = ap.parse_args()
    cpu = host_cpu()
    flags = ", ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8") if f in cpu.flags)
    work = Path(tempfile.mkdtemp(prefix="mobilize-llm-shapes-"))
    title, config_class, model_class, shape = SHAPES[args.shape]
    folder = work / f"{args.shape}-random"
    t0 = time.time()
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**shape))
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(str(folder))
    byte_tokenizer(folder)
    del model
    print(f"CPU: {cpu.model} ({flags}); {time.strftime('%Y-%m-%d')}; {title} shape, random weights, "
          f"{params / 1e6:.0f}M parameters, saved in {time.time() - t0:.0f} s; prompt {args.prompt}, {args.threads} "
          f"thread(s), " + ("compare's defaults otherwise" if args.default_plan else
                            f"decode {args.gen}, {args.rounds} interleaved rounds"))
    out = work / "compare"
    argv = [sys.executable, "-m", "mobilize", "compare", str(folder), "--threads", str(args.threads),
            "--prompt-len", str(args.prompt), "-o", str(out)]
    if not args.default_plan:
        argv += ["--task", "generation", "--gen-len", str(args.gen), "--eval-len", "32", "--rounds", str(args.rounds),
                 "--timeout", str(args.timeout), *[a for v in (args.variant or VARIANTS) for a in ("--variant", v)]]
    print("run: " + " ".join(["mobilize", *argv[3:]]))
    t0 = time.time()
    done = subprocess.run(argv, capture_output=True, text=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"compare: exit {done.returncode} in {time.time() - t0:.0f} s (builds, checks, timing); the largest "
          f"process's peak RSS {peak:.0f} MB")
    if not (out / "report.json").is_file():
        sys.exit(done.stderr[-3000:])
    report = json.loads((out / "report.json").read_text())
    wall = (report.get("stage_seconds") or {}).get("wall") or {}
    print("phases: " + ", ".join(f"{k.replace('_', ' ')} {v:.0f} s" for k, v in wall.items()))
    if report.get("reference_failure"):  # nothing was timed: say why instead of a table of PENDING rows
        failure = report["reference_failure"]
        sys.exit(f"the float reference failed ({failure.get('outcome')}): {failure.get('message')}; "
                 f"{failure.get('hint') or ''}")
    print(f"{'file':<20} {'outcome':<11} {'MB':>7} {'build s':>8} {'ms/tok':>7} {'tok/s':>6} {'TTFT ms':>8} "
          f"{'read/tok MB':>11} {'bound tok/s':>11} {'% bound':>7} {'+mem MB':>7} {'build MB':>8}")
    for v in report["variants"]:
        t = v.get("tokens") or {}

        def cell(key: str, fmt: str, width: int) -> str:
            return format(t[key], fmt).rjust(width) if t.get(key) is not None else "-".rjust(width)

        print(f"{v['name']:<20} {v['outcome']:<11} {(v.get('size_bytes') or 0) / 1e6:7.0f} "
              f"{(v.get('build_s') or 0):8.0f} {cell('decode_ms_per_token_p50', '.2f', 7)} "
              f"{cell('decode_tokens_per_s', '.1f', 6)} {cell('ttft_ms_p50', '.0f', 8)} "
              f"{(t.get('bytes_per_token') or 0) / 1e6:11.1f} {cell('bound_tokens_per_s', '.1f', 11)} "
              f"{'cache' if t.get('cache_resident') else cell('percent_of_bound', '.0f', 7):>7} "
              f"{cell('footprint_mb', '.0f', 7)} {(v.get('build_peak_rss_mb') or 0):8.0f}")
    bandwidth = (report.get("generation") or {}).get("bandwidth") or {}
    print(f"bandwidth: {bandwidth.get('gb_per_s', float('nan')):.1f} GB/s on {args.threads} thread(s) "
          f"({bandwidth.get('how', '')})")
    sys.path.insert(0, str(Path(__file__).parent))
    from llm import SAME_ENGINE, ratio

    timed = [v["name"] for v in report["variants"] if (v.get("tokens") or {}).get("decode_ms_per_token_p50")]
    print("decode time per token against llama.cpp's Q4_K_M, paired rounds of this run (random weights: no pick; "
          "the verdicts judge nothing real - VACUOUS):")
    for name in timed:
        if name != "llamacpp-q4_k_m":
            print("  " + ratio(report, name, "llamacpp-q4_k_m"))
    for own, peer in SAME_ENGINE:
        print("  " + ratio(report, own, peer) + "   [mobilize's file vs the same engine's peer CLI file]")
    for v in report["variants"]:
        if v["outcome"] in ("UNSUPPORTED", "EXPORT_FAIL", "LOAD_FAIL", "FAIL"):
            print(f"  {v['name']}: {v['outcome']}: {' '.join(v.get('notes') or [])[:240]}")
    print(f"report: {out / 'report.json'}")


if __name__ == "__main__":
    main()
