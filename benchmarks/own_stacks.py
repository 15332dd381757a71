"""Each engine's own generation loop against mobilize's decoder session on the same file (issue #63 items 3 and 4):
the time per decoded token and the time to the first token, in one process per engine and thread count, the two
loops alternating round by round on the same prompt; the ratio session / own stack from paired rounds (95% t
interval on their logs; inside the interval of 1.0 is a tie).  The CPU is printed.

- llama.cpp (``llamacpp-q4_0``): its ``simple`` example's loop - ``llama_batch_get_one`` over the prompt (the output
  head on its last token only), then one token a ``llama_decode``, each picked by its greedy sampler
  (``llama_sampler_sample``) - on the same libllama and context as the session;
- onnxruntime-genai (``onnx-genai-int4``): its Generator's loop - ``append_tokens(prompt)``, then
  ``generate_next_token()`` (greedy) until the length, on a second ``og.Model`` of the same folder.

The session is fed the float model's greedy ids as compare feeds every file (``first`` for the prompt: the last
position's logits; ``decode`` per token); the own loops pick their own tokens - the work per token is the same.
OpenVINO GenAI's LLMPipeline against the session: benchmarks/openvino_genai.py (it needs the optimum-intel peer
venv, scripts/setup-peers.sh).

    .venv/bin/python benchmarks/own_stacks.py [--shape tiny_lm|qwen2.5-0.5b|llama-3.2-1b] [--threads 1 2]
        [--prompt 128] [--gen 64] [--rounds 9] [--variant llamacpp-q4_0 --variant onnx-genai-int4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent))

VARIANTS = ("llamacpp-q4_0", "onnx-genai-int4")


def model_folder(shape: str, work: Path) -> Path:
    """zoo:tiny_lm saved with its tokenizer, or one of llm_shapes.py's random shapes."""
    folder = work / shape
    if shape == "tiny_lm":
        from mobilize.generation.package import copy_tokenizer
        from mobilize.zoo import ZOO, tiny_lm

        ZOO.get("tiny_lm").build().lm.float().eval().save_pretrained(str(folder))
        copy_tokenizer(tiny_lm.WEIGHTS_DIR, folder)
        return folder
    import torch
    import transformers
    from llm_shapes import SHAPES, byte_tokenizer

    _, config_class, model_class, config = SHAPES[shape]
    torch.manual_seed(0)
    getattr(transformers, model_class)(getattr(transformers, config_class)(**config)).save_pretrained(str(folder))
    byte_tokenizer(folder)
    return folder


def session_round(session: Any, prompt: list[int], feed: list[int]) -> tuple[float, list[float]]:
    from mobilize.bench.decoding import decode_round

    ttft_ns, steps_ns = decode_round(session, prompt, feed, len(feed))
    return ttft_ns / 1e6, [t / 1e6 for t in steps_ns]


def llama_own(session: Any) -> Callable[[list[int], int], tuple[float, list[float]]]:
    """llama.cpp's own loop on the session's context (emptied first, as each prefill of the session empties it)."""
    lib, ctx = session.lib, session.ctx
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())

    def run(prompt: list[int], gen: int) -> tuple[float, list[float]]:
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
        ids = (lib.llama_token * len(prompt))(*prompt)
        t0 = time.perf_counter_ns()
        if lib.llama_decode(ctx, lib.llama_batch_get_one(ids, len(prompt))) != 0:
            raise RuntimeError("llama_decode failed on the prompt")
        token = lib.llama_sampler_sample(chain, ctx, -1)
        ttft = (time.perf_counter_ns() - t0) / 1e6
        steps = []
        for _ in range(gen):
            one = (lib.llama_token * 1)(token)
            t = time.perf_counter_ns()
            if lib.llama_decode(ctx, lib.llama_batch_get_one(one, 1)) != 0:
                raise RuntimeError("llama_decode failed on a token")
            token = lib.llama_sampler_sample(chain, ctx, -1)
            steps.append((time.perf_counter_ns() - t) / 1e6)
        return ttft, steps

    return run


def genai_own(path: Path, threads: int, max_len: int) -> Callable[[list[int], int], tuple[float, list[float]]]:
    """onnxruntime-genai's own Generator loop on a second Model of the same folder (the same session options)."""
    import numpy as np

    from mobilize.backends.onnxruntime.genai import GenaiDecoderSession

    og_session = GenaiDecoderSession(path, threads, max_len)
    og, model = og_session.og, og_session.model

    def run(prompt: list[int], gen: int) -> tuple[float, list[float]]:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + gen + 1, do_sample=False)
        generator = og.Generator(model, params)
        t0 = time.perf_counter_ns()
        generator.append_tokens(np.asarray([prompt], dtype=np.int32))
        generator.generate_next_token()  # the first token, from the prompt's logits
        ttft = (time.perf_counter_ns() - t0) / 1e6
        steps = []
        for _ in range(gen):
            t = time.perf_counter_ns()
            generator.generate_next_token()  # the model on the last token, then its pick
            steps.append((time.perf_counter_ns() - t) / 1e6)
        return ttft, steps

    return run


def measure(name: str, path: Path, threads: int, prompt: list[int], feed: list[int], rounds: int) -> dict:
    from mobilize.generation.plan import generation_variants

    [variant] = generation_variants([name])
    max_len = len(prompt) + len(feed) + 2
    session = variant.load(path, threads, max_len)
    own = llama_own(session) if variant.engine == "llamacpp" else genai_own(path, threads, max_len)
    for _ in range(2):  # warm both
        session_round(session, prompt, feed[:8])
        own(prompt, 8)
    rows: dict[str, list] = {"session_tok": [], "own_tok": [], "session_ttft": [], "own_ttft": []}
    for i in range(rounds):
        order = [("session", lambda: session_round(session, prompt, feed)), ("own", lambda: own(prompt, len(feed)))]
        for who, call in (order if i % 2 == 0 else order[::-1]):  # alternate which goes first
            ttft, steps = call()
            rows[f"{who}_ttft"].append(ttft)
            rows[f"{who}_tok"].append(statistics.median(steps))
    session.close()
    return rows


def main() -> None:
    from mobilize.accuracy.stats import ratio_ci
    from mobilize.core.target import host_cpu
    from mobilize.generation.plan import generation_variants, unavailable

    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="tiny_lm", help="tiny_lm, qwen2.5-0.5b or llama-3.2-1b")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--variant", action="append")
    args = ap.parse_args()
    cpu = host_cpu()
    flags = ", ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8") if f in cpu.flags)
    work = Path(tempfile.mkdtemp(prefix="mobilize-own-stacks-"))
    folder = model_folder(args.shape, work)
    import numpy as np

    rng = np.random.default_rng(0)
    vocab = 256 if args.shape != "tiny_lm" else 4000  # the byte tokenizer's ids; tiny_lm's 4k BPE
    prompt = [int(t) for t in rng.integers(3, vocab, args.prompt)]
    feed = [int(t) for t in rng.integers(3, vocab, args.gen)]
    print(f"CPU: {cpu.model} ({flags}); {time.strftime('%Y-%m-%d')}; {args.shape}; prompt {args.prompt} tokens, "
          f"{args.gen} decoded, {args.rounds} alternating rounds per thread count")
    print(f"{'file':<18} {'thr':>3} {'session ms/tok':>14} {'own ms/tok':>10} {'ratio [95% CI]':>22} "
          f"{'session TTFT':>12} {'own TTFT':>9} {'ratio [95% CI]':>22}")
    for name in args.variant or VARIANTS:
        [variant] = generation_variants([name])
        if unavailable(variant):
            print(f"{name}: left out: {unavailable(variant)}")
            continue
        t0 = time.time()
        path = variant.build_file(folder, work / name)
        built = time.time() - t0
        for threads in args.threads:
            rows = measure(name, path, threads, prompt, feed, args.rounds)
            tok, ttft = ratio_ci(rows["session_tok"], rows["own_tok"]), ratio_ci(rows["session_ttft"], rows["own_ttft"])
            print(f"{name:<18} {threads:>3} {statistics.median(rows['session_tok']):14.3f} "
                  f"{statistics.median(rows['own_tok']):10.3f} {tok.ratio:8.3f} [{tok.low:.3f}-{tok.high:.3f}] "
                  f"{statistics.median(rows['session_ttft']):12.2f} {statistics.median(rows['own_ttft']):9.2f} "
                  f"{ttft.ratio:8.3f} [{ttft.low:.3f}-{ttft.high:.3f}]   (built in {built:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
