"""compare's worker jobs for a causal decoder (the ``generation`` task): the same jobs, messages and stages as every
other task's (:mod:`mobilize.compare.worker`), with the decoder's unit and measures.

- ``reference``: the float model saved once as a transformers folder (every engine builds from it), the held-out
  token ids, the prompt timed and the ids fed to the decode steps (the float model's greedy continuation), and
  the float model's own answers - teacher-forced logits and greedy continuations, every token a cache-free
  forward's choice - written beside the run for every other job; answers ``ReferenceDone`` (task ``generation``) and ``LintDone``.
- ``build``: the engine's own tool builds the file from that folder; answers ``Built``.
- ``run``: the file loaded in its engine's decoder session and checked - teacher-forced logits on the held-out
  ids, greedy continuations decoded with the cache, the cache against its own prefill; answers ``Ready`` with a
  :class:`~mobilize.accuracy.decoder_verdict.TokenComparison` (the parent's ``assess`` judges it), then times
  rounds until ``Stop`` where the shared timing host cannot take it; the file's memory footprint is measured
  beside, in a fresh process holding only its runtime (:mod:`mobilize.generation.footprint`).
- the timing host (:mod:`mobilize.compare.host`) holds :class:`HostedDecoder` for each file: every round one
  prefill (time to first token) and the decode steps (time per token), :func:`mobilize.bench.decoding.decode_round`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from mobilize.compare.messages import Bench, Built, Job, LintDone, Ready, ReferenceDone, Stop, Times

CACHE_CHECK_PREFIX = 8
"""Tokens prefilled before the cache check decodes the rest of its sequence one at a time."""
CACHE_CHECK_TOKENS = 32
"""Tokens of the cache check's sequence (the first held-out sequence's first ones)."""

FOOTPRINT_TIMEOUT_S = 300.0
"""The most the memory footprint's own process may take (a load of the file and a few tokens; a 1B file's load is
seconds): past it the figure is left out, said in a note, and the check's verdict stands."""


MODEL_FOLDER = "model"
"""The saved float model every engine builds from, in the run's own temporary folder (removed with it)."""


def model_folder(job: Job) -> Path:
    return Path(job.reference_path).parent / MODEL_FOLDER


def reference_file(job: Job) -> Path:
    return Path(job.reference_path).with_suffix(".npz")


def serve_decoder(conn, job: Job, enter) -> None:
    if job.kind == "reference":
        enter("reference")
        conn.send(make_reference(job))
        conn.send(LintDone(None, None, 0.0))  # lint reads tensor-in, tensor-out models: nothing to send beside
    elif job.kind == "build":
        enter("export")
        conn.send(build(job))
    else:
        check_and_serve(conn, job, enter)


def make_reference(job: Job) -> ReferenceDone:
    from mobilize.accuracy.generation import near_uniform, score_sequences
    from mobilize.accuracy.tasks import Task, TaskChoice
    from mobilize.bench.bandwidth import measure_bandwidth
    from mobilize.generation.model import prepare

    s = job.decoding
    model = prepare(job.model, model_folder(job), s, trust_pickle=job.trust_pickle)
    np.savez(reference_file(job), eval_ids=model.eval_ids, logits=model.reference_logits,
             prompt=np.asarray(model.prompt, dtype=np.int64), decode_ids=np.asarray(model.decode_ids, dtype=np.int64),
             prompts=np.asarray(model.continuation_prompts, dtype=np.int64).reshape(len(model.continuation_prompts), -1),
             continuations=np.asarray(model.reference_continuations, dtype=np.int64).reshape(
                 len(model.reference_continuations), -1))
    reason = near_uniform(score_sequences(model.reference_logits, model.eval_ids))
    warning = (f"WARNING: the float model predicts next to nothing: {reason}: every check against it is vacuous "
               f"(rule vacuous-reference); fix: train or load weights" if reason else None)
    task = TaskChoice(Task.GENERATION, bool(s.get("task_given")), s.get("task_why") or "a causal LM")
    facts = {"held_out": model.text_source, "parameters": model.parameters, "vocab_size": model.vocab_size,
             "context": model.context, "notes": model.notes,
             "settings": {k: model.settings[k] for k in ("eval_tokens", "max_len")},
             "shapes": model.shapes, "bandwidth": measure_bandwidth(threads=job.threads).to_json()}
    return ReferenceDone(len(model.eval_ids), False, None, ["logits"], 1, warning, task.to_json(), facts)


def decoder_variant(job: Job) -> Any:
    from mobilize.generation.plan import generation_variants

    [variant] = generation_variants([job.variant["name"]])
    return variant


def file_bytes(path: Path, exclude: tuple[str, ...] = ()) -> int:
    """What a decoder file weighs on disk: a folder's files (less those named in ``exclude``: the package's
    tokenizer and configs are not the model), or the file with the side files its engine declares for its format
    (an OpenVINO ``.xml``'s ``.bin``)."""
    from mobilize.core.artifact import artifact_size_bytes, format_for_path

    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name not in exclude)
    return artifact_size_bytes(path, format_for_path(path))


def build(job: Job) -> Built:
    from mobilize.bench.harness import peak_rss_mb
    from mobilize.core.backend import BACKENDS
    from mobilize.core.errors import BackendUnavailableError
    from mobilize.generation.package import PACKAGE_FILES, write_package
    from mobilize.generation.plan import unavailable

    variant = decoder_variant(job)
    why = unavailable(variant)
    if why:
        raise BackendUnavailableError(f"{variant.name} cannot be built here: {why}")
    out = Path(job.out_dir) / variant.name
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    path = variant.build_file(model_folder(job), out)
    formats = list(BACKENDS.get(variant.engine).formats)
    fmt = formats[0] if formats else variant.engine
    details = {"engine": variant.engine, "weights": variant.weights, "how": variant.how,
               "build_s": time.perf_counter() - t0, "build_peak_rss_mb": round(peak_rss_mb(), 1),
               **({"group": variant.group} if variant.group else {}),
               **({"bytes_per_token": variant.bytes_read(path)} if variant.bytes_read else {})}
    notes = write_package(model_folder(job), path, variant, None, out)  # what runs it, beside it (mobilize generate)
    return Built(str(path), fmt, file_bytes(path, exclude=PACKAGE_FILES), str(variant.promise), notes, details)


def check_and_serve(conn, job: Job, enter) -> None:
    """Load the file, check it against the float model's answers, then time rounds until ``Stop``."""
    from mobilize.accuracy.decoder_verdict import TokenComparison, continuation_match
    from mobilize.accuracy.generation import measure_tokens
    from mobilize.bench.decoding import greedy
    from mobilize.bench.harness import peak_rss_mb

    variant = decoder_variant(job)
    ref = np.load(reference_file(job))
    enter("load")
    t0 = time.perf_counter_ns()
    session = variant.load(Path(job.artifact), job.threads, job.decoding["max_len"])
    load_ms = (time.perf_counter_ns() - t0) / 1e6
    enter("run")
    t0 = time.perf_counter_ns()
    session.prefill([int(t) for t in ref["prompt"]])
    first_run_ms = (time.perf_counter_ns() - t0) / 1e6
    enter("accuracy")
    ids, gen = ref["eval_ids"], int(job.decoding["gen_tokens"])
    logits = np.stack([np.asarray(session.prefill([int(t) for t in row]), dtype=np.float32) for row in ids])
    continuations = [greedy(session, list(p), gen) for p in ref["prompts"]]
    cache = cache_check(session, [int(t) for t in ids[0][:CACHE_CHECK_TOKENS]], ref["logits"][0][:CACHE_CHECK_TOKENS])
    comparison = TokenComparison(measure_tokens(ref["logits"], logits, ids), logits_sqnr_db(ref["logits"], logits),
                                 cache, continuation_match(ref["continuations"].tolist(), continuations), gen)
    del logits
    from mobilize.bench.decoding import ttft_note
    from mobilize.generation.footprint import measure_footprint

    notes = [*getattr(session, "notes", []), ttft_note(session)]
    details = {"check_peak_rss_mb": peak_rss_mb()}
    enter("footprint")
    footprint = measure_footprint(variant.name, Path(job.artifact), job.threads, job.decoding["max_len"],
                                  [int(t) for t in ref["prompt"]], timeout_s=FOOTPRINT_TIMEOUT_S)
    details["footprint"] = footprint
    if "error" in footprint:
        notes.append(f"memory footprint {footprint['error']}")
    enter("bench")
    conn.send(Ready(variant.engine, str(job.variant.get("format") or variant.engine), str(variant.promise), load_ms,
                    first_run_ms, comparison, notes, details, None, True, ""))
    timed = HostedDecoder(job, session=session)
    while True:
        command = conn.recv()
        if isinstance(command, Bench):
            conn.send(timed.bench(command))
        elif isinstance(command, Stop):
            session.close()
            return


def logits_sqnr_db(reference: np.ndarray, candidate: np.ndarray) -> float:
    """SQNR of a file's logits against the float model's, in float64, over every position."""
    from mobilize.accuracy.metrics import sqnr_db

    if candidate.shape != reference.shape:
        return float("-inf")
    return sqnr_db(reference, candidate)


def cache_check(session: Any, ids: list[int], reference: np.ndarray | None = None) -> dict[str, Any]:
    """The file's logits for positions ``CACHE_CHECK_PREFIX``.. decoded one token at a time with its cache, against
    the same positions from one prefill of the whole sequence: a broken cache (wrong positions, stale entries)
    shows here whatever the weights are.  ``reference``: the float model's logits for ``ids`` (teacher-forced);
    the file's prefill against them on the same positions (``prefill_sqnr_db``) is how far the file's own rounding
    takes it, which the verdict weighs the steps' difference against
    (:func:`mobilize.accuracy.decoder_verdict.judge_decoder_fidelity`)."""
    from mobilize.accuracy.metrics import sqnr_db

    full = np.asarray(session.prefill(ids), dtype=np.float64)
    session.prefill(ids[:CACHE_CHECK_PREFIX])
    stepped = [np.asarray(session.decode(t), dtype=np.float64) for t in ids[CACHE_CHECK_PREFIX:-1]]
    want = full[CACHE_CHECK_PREFIX:len(ids) - 1]
    got = np.stack(stepped) if stepped else want
    out = {"positions": len(stepped), "sqnr_db": sqnr_db(want, got),
           "max_abs": float(np.abs(got - want).max()) if stepped else 0.0,
           "top1_equal": float(np.mean(got.argmax(-1) == want.argmax(-1))) if stepped else 1.0}
    if reference is not None and stepped:
        floats = np.asarray(reference, dtype=np.float64)[CACHE_CHECK_PREFIX:len(ids) - 1]
        out["prefill_sqnr_db"] = sqnr_db(floats, want) if floats.shape == want.shape else None
    return out


class HostedDecoder:
    """One decoder file in the shared timing host (or its checking worker): its session and the ids every round
    feeds it."""

    def __init__(self, job: Job, session: Any = None):
        variant = decoder_variant(job)
        self.runtime = variant.engine
        self.session = session or variant.load(Path(job.artifact), job.threads, job.decoding["max_len"])
        ref = np.load(reference_file(job))
        self.prompt, self.decode_ids = [int(t) for t in ref["prompt"]], [int(t) for t in ref["decode_ids"]]
        if session is None:
            self.session.prefill(self.prompt)  # loaded and run once, as every timing worker does before its rounds

    def bench(self, command: Bench) -> Times:
        from mobilize.bench.decoding import decode_round, warm_decode
        from mobilize.bench.harness import peak_rss_mb

        warm_decode(self.session, self.prompt, self.decode_ids, command.warmup, command.warmup_s)
        prefill_ns, times = decode_round(self.session, self.prompt, self.decode_ids, command.iterations)
        return Times(times, sum(times), peak_rss_mb(), prefill_ns=prefill_ns)
