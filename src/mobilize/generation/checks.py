"""What runs in a child process for each decoder variant: the build with its engine's own tool, then the checks
on the file - teacher-forced logits on the held-out ids (one prefill each), greedy continuations decoded with
the cache, and the file's cache against its own prefill (the same positions, decoded one by one).

Module-level functions with picklable arguments: :func:`mobilize.pipeline.isolate.run_isolated` runs them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

CACHE_CHECK_PREFIX = 8
"""Tokens prefilled before the cache check decodes the rest of its sequence one at a time."""


def file_bytes(path: Path) -> int:
    """What a decoder file weighs on disk: a folder's files, or the file with the weights beside it."""
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    side = path.with_suffix(".bin")
    return path.stat().st_size + (side.stat().st_size if side != path and side.exists() else 0)


def build_variant(name: str, folder: str, out_dir: str,
                  progress: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    from mobilize.generation.plan import generation_variants

    [variant] = generation_variants([name])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    path = variant.build_file(Path(folder), out)
    return {"path": str(path), "build_s": time.perf_counter() - t0, "size_bytes": file_bytes(path)}


def check_variant(name: str, path: str, threads: int, max_len: int, eval_ids: np.ndarray,
                  prompts: Sequence[Sequence[int]], gen_tokens: int, logits_path: str,
                  progress: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """Teacher-forced logits (saved to ``logits_path``), greedy continuations, and the cache check."""
    from mobilize.generation.plan import generation_variants

    [variant] = generation_variants([name])
    t0 = time.perf_counter()
    session = variant.load(Path(path), threads, max_len)
    load_s = time.perf_counter() - t0
    try:
        logits = np.stack([np.asarray(session.prefill([int(t) for t in row]), dtype=np.float32) for row in eval_ids])
        np.save(logits_path, logits)
        continuations = [greedy(session, list(p), gen_tokens) for p in prompts]
        cache = cache_check(session, [int(t) for t in eval_ids[0][:min(len(eval_ids[0]), 32)]])
    finally:
        session.close()
    return {"load_s": load_s, "continuations": continuations, "cache": cache,
            "notes": list(getattr(session, "notes", [])), "peak_rss_mb": _peak_rss_mb()}


def _peak_rss_mb() -> float:
    """This process's peak resident memory (it loaded and ran one decoder file, with its runtime)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def greedy(session: Any, prompt: list[int], steps: int) -> list[int]:
    token = int(np.argmax(session.prefill(prompt)[-1]))
    out = [token]
    for _ in range(steps - 1):
        token = int(np.argmax(session.decode(token)))
        out.append(token)
    return out


def cache_check(session: Any, ids: list[int]) -> dict[str, Any]:
    """The file's logits for positions ``CACHE_CHECK_PREFIX``.. decoded one token at a time with its cache, against
    the same positions from one prefill of the whole sequence: a broken cache (wrong positions, stale entries)
    shows here whatever the weights are."""
    full = np.asarray(session.prefill(ids), dtype=np.float64)
    session.prefill(ids[:CACHE_CHECK_PREFIX])
    stepped = [np.asarray(session.decode(t), dtype=np.float64) for t in ids[CACHE_CHECK_PREFIX:-1]]
    want = full[CACHE_CHECK_PREFIX:len(ids) - 1]
    got = np.stack(stepped) if stepped else want
    noise = float(((got - want) ** 2).sum())
    signal = float((want ** 2).sum())
    sqnr = float("inf") if noise == 0 else 10 * np.log10(signal / noise) if signal > 0 else float("-inf")
    return {"positions": len(stepped), "sqnr_db": sqnr, "max_abs": float(np.abs(got - want).max()) if stepped else 0.0,
            "top1_equal": float(np.mean(got.argmax(-1) == want.argmax(-1))) if stepped else 1.0}
