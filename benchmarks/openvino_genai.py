"""OpenVINO's int4 decoder at a real shape: OpenVINO's own generation stack against mobilize's session, and where a
token's time goes on this CPU.

Qwen2.5-0.5B's shape with random weights (``llm_shapes.py``'s folder; ``--shape llama-3.2-1b`` for the 1B one), made
into int4 IR twice: by optimum-intel's one-line CLI (``optimum-cli export openvino --task text-generation-with-past
--weight-format int4``: int4 asymmetric, group 128) and by mobilize (``openvino-int4``: NNCF int4 symmetric, group
32).  Then, in one interleaved loop, a fresh process per file and round, a 128-token prompt and 64 greedy tokens:

- ``genai`` / ``genai-sdpa``: OpenVINO GenAI's ``LLMPipeline`` (openvino-genai, installed beside optimum-intel in its
  peer venv by ``scripts/setup-peers.sh optimum-intel``) on optimum-intel's folder, with its default attention
  backend and with ``ATTENTION_BACKEND=SDPA``; time per token is GenAI's own ``perf_metrics`` TPOT;
- ``session``: mobilize's OpenVINO decoder session (what compare times) on the same IR;
- ``session-own``: the session on mobilize's own file (GenAI cannot run it: its IR takes no ``attention_mask``).

Each process warms up on another prompt first (GenAI's prefix cache would otherwise answer the timed prompt's
prefill from memory).  Last, one decode profile of optimum-intel's IR on the CPU plugin (``PERF_COUNT``): each node
type's share of the node time and the kernel it ran - which is what decides the rate on this CPU.

    .venv/bin/python benchmarks/openvino_genai.py [--shape qwen2.5-0.5b] [--threads 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT, GEN = 128, 64

GENAI = """
import json, sys, numpy as np, openvino as ov, openvino_genai as g
folder, threads, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3]
props = {"INFERENCE_NUM_THREADS": threads} | ({"ATTENTION_BACKEND": backend} if backend else {})
pipe = g.LLMPipeline(folder, "CPU", **props)
def ids(seed):
    x = np.random.default_rng(seed).integers(3, 250, (1, %(prompt)d)).astype(np.int64)
    return g.TokenizedInputs(ov.Tensor(x), ov.Tensor(np.ones_like(x)))
config = g.GenerationConfig(max_new_tokens=%(gen)d, min_new_tokens=%(gen)d, do_sample=False)
pipe.generate(ids(1), config)
metrics = pipe.generate(ids(0), config).perf_metrics
print(json.dumps({"tpot_ms": metrics.get_tpot().mean, "ttft_ms": metrics.get_ttft().mean}))
""" % {"prompt": PROMPT, "gen": GEN}

SESSION = """
import json, statistics, sys, time, numpy as np
from pathlib import Path
from mobilize.backends.openvino.decoder import OpenVinoDecoderSession
session = OpenVinoDecoderSession(Path(sys.argv[1]), int(sys.argv[2]), %(prompt)d + %(gen)d)
def run(seed, steps):
    ids = [int(t) for t in np.random.default_rng(seed).integers(3, 250, %(prompt)d)]
    t0 = time.perf_counter(); token = int(np.argmax(session.prefill(ids))); ttft = time.perf_counter() - t0
    times = []
    for _ in range(steps - 1):
        t0 = time.perf_counter(); token = int(np.argmax(session.decode(token))); times.append(time.perf_counter() - t0)
    return ttft * 1e3, statistics.fmean(times) * 1e3
run(1, 8)
ttft, tpot = run(0, %(gen)d)
print(json.dumps({"tpot_ms": tpot, "ttft_ms": ttft, "notes": session.notes}))
""" % {"prompt": PROMPT, "gen": GEN}

PROFILE = """
import collections, json, sys, numpy as np, openvino as ov
compiled = ov.Core().compile_model(sys.argv[1], "CPU", {"INFERENCE_NUM_THREADS": int(sys.argv[2]),
    "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32", "PERF_COUNT": True})
request, names = compiled.create_infer_request(), {p.get_any_name() for p in compiled.inputs}
def run(ids, start):
    n = ids.shape[1]
    feed = {"input_ids": ids, "attention_mask": np.ones((1, start + n), np.int64), "beam_idx": np.zeros(1, np.int32)}
    if "position_ids" in names:
        feed["position_ids"] = np.arange(start, start + n, dtype=np.int64)[None]
    request.infer(feed)
    return request.get_tensor("logits").data[0, -1]
logits = run(np.random.default_rng(0).integers(3, 250, (1, %(prompt)d)), 0)
kinds, nodes = collections.Counter(), collections.Counter()
for step in range(32):
    logits = run(np.array([[int(logits.argmax())]]), %(prompt)d + step)
    if step >= 8:
        for p in request.get_profiling_info():
            kinds[f"{p.node_type} ({p.exec_type})"] += p.real_time.total_seconds()
            nodes[p.node_name] += p.real_time.total_seconds()
print(json.dumps({"kinds": kinds.most_common(6), "nodes": nodes.most_common(3), "total": sum(kinds.values())}))
""" % {"prompt": PROMPT}


def child(python: str, script: str, *args: str, peer: bool = False) -> dict:
    env = dict(os.environ)
    if peer:
        env.pop("PYTHONPATH", None)  # the peer venv's own packages, not mobilize's
    done = subprocess.run([python, "-c", script, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"{Path(python).parent.parent.name} run failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from llm_shapes import SHAPES
    from mobilize.core.peers import OPTIMUM_INTEL, peers_dir
    from mobilize.core.target import host_cpu

    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    peer_python = str(peers_dir() / "optimum-intel" / "bin" / "python")
    why = OPTIMUM_INTEL.available()
    if why or subprocess.run([peer_python, "-c", "import openvino_genai"], capture_output=True).returncode:
        sys.exit(why or "openvino-genai is not installed beside optimum-intel: bash scripts/setup-peers.sh optimum-intel")
    cpu = host_cpu()
    flags = ", ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx2_vnni", "amx_int8") if f in cpu.flags)
    title, config_class, model_class, shape = SHAPES[args.shape]
    work = Path(tempfile.mkdtemp(prefix="mobilize-openvino-genai-"))
    try:
        measure(args, work, peer_python, f"{cpu.model} ({flags})", title, config_class, model_class, shape)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # ~1.5 GB of folders and IR at 0.5B


def measure(args, work: Path, peer_python: str, cpu: str, title: str, config_class: str, model_class: str,
            shape: dict) -> None:
    import torch
    import transformers

    from llm_shapes import byte_tokenizer
    from mobilize.accuracy.stats import ratio_ci
    from mobilize.backends.openvino.decoder import build_int4, build_optimum_int4

    folder = work / args.shape
    torch.manual_seed(0)
    getattr(transformers, model_class)(getattr(transformers, config_class)(**shape)).save_pretrained(str(folder))
    byte_tokenizer(folder)
    t0 = time.time()
    optimum_xml = build_optimum_int4(folder, work / "optimum")
    t1 = time.time()
    own_xml = build_int4(folder, work / "own")
    print(f"CPU: {cpu}; {time.strftime('%Y-%m-%d')}; {title} shape, random weights; builds: "
          f"optimum-cli {t1 - t0:.0f} s, mobilize {time.time() - t1:.0f} s; prompt {PROMPT}, {GEN} tokens, "
          f"{args.threads} thread(s), {args.rounds} interleaved rounds, a fresh process per file and round")
    t = str(args.threads)
    runs = {"genai": (peer_python, GENAI, str(optimum_xml.parent), t, ""),
            "genai-sdpa": (peer_python, GENAI, str(optimum_xml.parent), t, "SDPA"),
            "session": (sys.executable, SESSION, str(optimum_xml), t),
            "session-own": (sys.executable, SESSION, str(own_xml), t)}
    rounds: dict[str, list[dict]] = {name: [] for name in runs}
    for r in range(args.rounds):
        for name in list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]:  # the order rotates each round
            python, script, *rest = runs[name]
            rounds[name].append(child(python, script, *rest, peer=python == peer_python))
    print(f"{'stack':<12} {'file':<26} {'ms/token (median, range)':<26} {'TTFT ms':>8}")
    files = {"genai": "optimum-cli int4 g128 asym", "genai-sdpa": "optimum-cli int4 g128 asym",
             "session": "optimum-cli int4 g128 asym", "session-own": "mobilize int4 g32 sym"}
    for name, got in rounds.items():
        tpot = [g["tpot_ms"] for g in got]
        print(f"{name:<12} {files[name]:<26} {statistics.median(tpot):7.2f} ({min(tpot):.2f}-{max(tpot):.2f})"
              f"{'':<9} {statistics.median(g['ttft_ms'] for g in got):8.0f}")
    print(f"session notes: {'; '.join(rounds['session'][0].get('notes') or [])}")
    for a, b in (("genai", "session"), ("genai-sdpa", "session"), ("session-own", "session")):
        ci = ratio_ci([g["tpot_ms"] for g in rounds[a]], [g["tpot_ms"] for g in rounds[b]])
        tie = ", a tie" if ci.low <= 1.0 <= ci.high else ""
        print(f"  {a} / {b}: {ci.ratio:.2f}x per token (95% CI {ci.low:.2f}-{ci.high:.2f}, {ci.rounds} paired rounds){tie}")
    profile = child(sys.executable, PROFILE, str(optimum_xml), t)
    total = profile["total"]
    print("decode profile of optimum-cli's IR (CPU plugin PERF_COUNT, 24 steps after the prompt; share of node time):")
    for kind, s in profile["kinds"]:
        print(f"  {100 * s / total:5.1f}%  {kind}")
    for node, s in profile["nodes"]:
        print(f"  {100 * s / total:5.1f}%  node {node}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
