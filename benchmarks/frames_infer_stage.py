"""Why is a file's inference slower inside the frame loop than benched alone?  (issue 41 item 6)

For each file and thread count, interleaved rounds (the order rotates each round) of:

  alone           ``run_prepared`` on the file's own prepared input, back to back (what plain ``bench`` times)
  loop            the infer stage of the frame loop (:mod:`mobilize.camera.loop`: convert, feed, infer, answer)
  loop-small      the same loop on the smallest frame that fills the input (no 3 MB frame: cache pressure)
  loop-misalign   the loop with the converter's buffer 16 bytes off a cache line (numpy's own alignment)
  control         the file alone on its own input, with the frame's convert between runs (the pause, not the input)
  control-1ms     the file alone with a 1 ms sleep between runs (a longer pause, nothing touched)

Each condition's ratio to ``alone`` is taken round by round (same round, same machine state); the table shows the
median ratio and its range over rounds.  If ``control`` is as slow as ``loop``, the pause between inferences slows
the runtime (its thread pool idles, caches refill) whatever input it gets; if ``loop`` is slower than ``control``,
the input the frame path hands over costs it.

    .venv/bin/python benchmarks/frames_infer_stage.py FILE [FILE ...] [--frames nv21:1920x1080] [--threads 1,2]
                                                      [--rounds 9] [--iter 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from mobilize.camera.frames import parse_frame_spec  # noqa: E402
from mobilize.camera.loop import INFER, FrameLoop, FrameTiming, frame_loop_for  # noqa: E402
from mobilize.core.artifact import Artifact  # noqa: E402
from mobilize.core.target import host_cpu  # noqa: E402
from mobilize.runtimes.base import open_session  # noqa: E402


def conditions(session, spec: str) -> dict:
    """name -> function(k) returning k infer times (ns)."""
    from mobilize.core.inputs import make_random_inputs

    x = make_random_inputs(session.target.input_specs, 0)  # the reference's float input, as compare's sample
    loop = frame_loop_for(session, x, FrameTiming(spec))
    own = loop.own_input()
    h, w = loop.cfg.output_size
    small = frame_loop_for(session, x, FrameTiming(f"{parse_frame_spec(spec).layout}:{w + w % 2}x{h + h % 2}"))
    off = FrameLoop(session, loop.cfg, loop.frames)
    raw = np.empty(off.buffer.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + 16
    off.buffer = raw[start:start + off.buffer.nbytes].view(off.buffer.dtype).reshape(off.buffer.shape)
    off.inputs = [off.view_of(off.buffer)]

    def infer_of(fl):
        return lambda k: fl.round(k).stage_ns[:, INFER].tolist()

    def slept(k):
        out = []
        for _ in range(k):
            time.sleep(0.001)
            a = time.perf_counter_ns()
            session.run_prepared(own)
            out.append(time.perf_counter_ns() - a)
        return out

    return {"alone": lambda k: loop.alone_round(k, own), "loop": infer_of(loop), "loop-small": infer_of(small),
            "loop-misalign": infer_of(off), "control": lambda k: loop.gap_round(k, own), "control-1ms": slept}


def measure(path: str, threads: int, spec: str, rounds: int, n: int) -> None:
    session = open_session(Artifact.from_file(path), threads=threads)
    conds = conditions(session, spec)
    medians = {k: [] for k in conds}
    for f in conds.values():
        f(10)
    for r in range(rounds):
        names = list(conds)
        for name in names[r % len(names):] + names[:r % len(names)]:
            conds[name](5)  # untimed: back to this condition's steady state
            medians[name].append(statistics.median(conds[name](n)) / 1e6)
    print(f"{Path(path).name} ({session.name}), {threads} thread(s)")
    for name, m in medians.items():
        ratios = [a / b for a, b in zip(m, medians["alone"])]
        print(f"  {name:<14} infer p50 {statistics.median(m):7.3f} ms   x alone {statistics.median(ratios):5.2f} "
              f"[{min(ratios):.2f}-{max(ratios):.2f}]")
    session.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--frames", default="nv21:1920x1080")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--iter", type=int, default=100)
    args = parser.parse_args()
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[0]
    print(f"CPU: {host_cpu().describe()}; load average {load} at the start; frames {args.frames}; {args.rounds} "
          f"interleaved rounds of {args.iter}")
    for path in args.files:
        for threads in map(int, args.threads.split(",")):
            measure(path, threads, args.frames, args.rounds, args.iter)
    return 0


if __name__ == "__main__":
    sys.exit(main())
