"""``mobilize bench FILE --task generation``: a decoder file timed in tokens, speed_benchmark style - time to the
first token for a prompt of P tokens, then microseconds per decoded token over G tokens with the KV cache.

The file is opened by the decoder session of the engine that owns its format (``Backend.decoders``); a saved
transformers folder or ``zoo:tiny_lm`` runs in eager PyTorch.  The prompt is seeded random token ids; the decode
steps are fed the greedy continuation found on the first run, so every run does the same work.
"""

from __future__ import annotations

import statistics
from mobilize.core.text import a
from pathlib import Path
from typing import Any


def decoder_loader(reference: str) -> tuple[Any, Path, str]:
    """(the engine's decoder variant, the path to load, how it was found) for a file, folder or zoo model."""
    import tempfile

    from mobilize.core.backend import all_backends, backend_for_format, entries
    from mobilize.core.errors import ConfigError
    from mobilize.sources.reference import ModelRef, RefKind

    from mobilize.generation.package import MANIFEST, open_package
    from mobilize.generation.plan import generation_variants

    here = Path(reference)
    if (here / MANIFEST).is_file() or (here.parent / MANIFEST).is_file():
        package = open_package(here)  # a package compare or optimize wrote: its manifest names the variant
        [variant] = generation_variants([package.variant])
        return variant, package.file, f"{package.variant} ({package.engine}'s decoder session)"
    ref = ModelRef.parse(reference)
    if ref.kind in (RefKind.ZOO, RefKind.MODEL_FOLDER, RefKind.PYTHON_FILE, RefKind.IMPORT):
        from mobilize.generation.model import causal_lm

        folder = Path(ref.path) if ref.kind == RefKind.MODEL_FOLDER else Path(tempfile.mkdtemp(prefix="mobilize-lm-"))
        if ref.kind != RefKind.MODEL_FOLDER:
            causal_lm(ref).save_pretrained(str(folder))
        backend, entry = entries("decoders")["eager-fp32"]
        return backend.load(entry), folder, "eager PyTorch with its DynamicCache"
    from mobilize.core.artifact import format_for_path

    fmt = format_for_path(Path(ref.path))
    backend = backend_for_format(fmt) or next(  # a decoder-only engine's format (GGUF) has no tensor runtime
        (b for b in all_backends() if b.decoders and fmt in b.suffixes.values()), None)
    if backend is None or not backend.decoders:
        raise ConfigError(f"no engine here runs {a(str(fmt))} file as a decoder with a KV cache",
                          hint="--task generation times files that mobilize compare --task generation built")
    name, entry = next(iter(backend.decoders.items()))
    return backend.load(entry), Path(ref.path), f"{backend.name}'s decoder session"


def bench_generation(reference: str, threads: int, prompt_tokens: int, gen_tokens: int, iterations: int,
                     warmup: int, progress: Any = None) -> dict[str, Any]:
    """Time a decoder with compare's own round (:func:`mobilize.bench.decoding.decode_round`): the prompt's prefill,
    then the decode steps, ``warmup`` untimed rounds first.  Runs in a child process (``mobilize bench``): a file
    that crashes its runtime is then a one-line error, not this process's death."""
    import numpy as np

    from mobilize.bench.decoding import decode_round, greedy

    from mobilize.generation.model import check_lengths
    from mobilize.generation.package import context_of

    variant, path, how = decoder_loader(reference)
    name = Path(path).name
    # Each step is announced with the engine and the file: a crash in the engine's native code (the child dies
    # without a word) is then blamed on that engine's step, not on the file (mobilize built valid files that one
    # llama.cpp build crashed on).
    say = progress or (lambda done, total, text: None)
    say(0, 3, f"{variant.engine} loading {name}")
    if Path(path).is_dir():  # a transformers folder (eager): its config's context; a file's session checks its own
        check_lengths({"prompt_tokens": prompt_tokens, "gen_tokens": gen_tokens, "eval_tokens": 1}, context_of(path),
                      reference)
    session = variant.load(path, threads, prompt_tokens + gen_tokens + 1)
    try:
        say(1, 3, f"{variant.engine} running its first prefill and decode steps on {name}")
        vocab = int(np.asarray(session.prefill([0])).shape[-1])
        prompt = [int(t) for t in np.random.default_rng(0).integers(0, vocab, size=prompt_tokens)]
        fed = greedy(session, prompt, gen_tokens)
        say(2, 3, f"{variant.engine} timing {warmup + iterations} rounds on {name}")
        prefill_ms, decode_us = [], []
        for run in range(warmup + iterations):
            first, steps = decode_round(session, prompt, fed, gen_tokens)
            if run >= warmup:
                prefill_ms.append(first / 1e6)
                decode_us += [t / 1e3 for t in steps]
    finally:
        session.close()
    decode_us.sort()
    per_token = statistics.median(decode_us)
    return {"model": reference, "task": "generation", "runner": how, "threads": threads,
            "prompt_tokens": prompt_tokens, "gen_tokens": gen_tokens, "iterations": iterations, "warmup": warmup,
            "prefill_ms_p50": statistics.median(prefill_ms), "decode_us_per_token_p50": per_token,
            "decode_us_per_token_p90": decode_us[int(0.9 * (len(decode_us) - 1))],
            "decode_tokens_per_s": 1e6 / per_token, "input_source": f"{prompt_tokens} seeded random token ids"}


def lines(r: dict[str, Any]) -> list[str]:
    return [f"Prefill finished. Milliseconds to first token: {r['prefill_ms_p50']:.3f} ({r['prompt_tokens']}-token "
            f"prompt, median of {r['iterations']} runs)",
            f"Main run finished. Microseconds per token: {r['decode_us_per_token_p50']:.1f}. Tokens per second: "
            f"{r['decode_tokens_per_s']:.1f}",
            f"decode per token: p50 {r['decode_us_per_token_p50']:.1f} us, p90 {r['decode_us_per_token_p90']:.1f} us "
            f"over {r['gen_tokens']} tokens x {r['iterations']} runs ({r['runner']}, {r['threads']} thread(s))"]
