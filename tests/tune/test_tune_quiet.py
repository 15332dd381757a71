"""tune's terminal (#40 item 13): the winner always shows its latency, and the libraries' own warnings go to
out/logs/tune.log, said once, not onto the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from mobilize.accuracy.verify import Verdict
from mobilize.core.outcome import Outcome
from mobilize.tune import timing
from mobilize.tune.candidates import Candidate


def test_a_lone_winner_is_timed(monkeypatch):
    monkeypatch.setattr(timing, "_rounds", lambda runs, sample, rounds, iterations: {n: [1.5, 1.4, 1.6] for n in runs})
    c = Candidate("onnx-int8", None, "onnxruntime", verdict=Verdict(Outcome.OK, "within-budget", "ok"))
    lost = Candidate("onnx-fp16", None, "onnxruntime", verdict=Verdict(Outcome.OVER_BUDGET, "budget", "over"))
    winner, tie = timing.choose([c, lost], [], 3, 5, False, lambda _t: None)
    assert winner is c and tie == [] and c.latency_ms_p50 == 1.5 and c.round_medians_ms


def test_library_warnings_go_to_the_log_not_the_terminal(tmp_path):
    """A real process (stderr a file descriptor): a numpy RuntimeWarning and a C-level line on fd 2 during the
    search land in out/logs/tune.log; the terminal gets one line that says where."""
    script = textwrap.dedent(f"""
        import os, warnings
        import numpy as np
        from mobilize.tune import run

        def fake(*args, echo, **kw):
            np.float32(1e30) * np.float32(1e30)  # RuntimeWarning: overflow encountered
            os.write(2, b"[W:onnxruntime:, graph.cc:1] a runtime's own log line\\n")
            echo("searched")
            return "result"

        run._tune = fake
        print(run.tune(None, [], data="digits", out_dir={str(tmp_path / 'out')!r}, echo=print))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "default"})
    assert done.returncode == 0, done.stderr
    assert "overflow" not in done.stderr and "runtime's own log line" not in done.stderr, done.stderr
    log = (tmp_path / "out" / "logs" / "tune.log").read_text()
    assert "overflow" in log and "runtime's own log line" in log
    assert f"are in {tmp_path / 'out' / 'logs' / 'tune.log'}, not shown here" in done.stdout
