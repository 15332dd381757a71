"""The user's own stderr lines are theirs (#39 item 7): a line the model prints through sys.stderr from __init__ or
forward reaches the terminal in bench and lint even when it reads like a runtime's log line, while the same text
written at the C level (fd 2, as the runtimes' C++ logging does) is still filtered; optimize says which log holds
its stderr, and compare which folder holds every stage's."""

from __future__ import annotations

import pytest

MODEL = '''
import os
import sys

import torch
from torch import nn


class Loud(nn.Module):
    def __init__(self):
        super().__init__()
        print("[W:onnxruntime: my own message from __init__]", file=sys.stderr)
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        print("[W:onnxruntime: my own message]", file=sys.stderr)
        os.write(2, b"[W:onnxruntime:, graph.cc:1 Resolve] a C-level runtime line\\n")
        return self.conv(x)
'''


def test_the_models_own_lines_show_in_bench_and_lint(run_cli_process, tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    for argv in (("bench", f"{tmp_path}/m.py:Loud", "--input_dims", "1,3,16,16", "--iter", "2", "--warmup", "0"),
                 ("lint", f"{tmp_path}/m.py:Loud", "--input_dims", "1,3,16,16")):
        code, out, err = run_cli_process(*argv)
        assert code == 0, err
        assert "[W:onnxruntime: my own message from __init__]" in err and "[W:onnxruntime: my own message]\n" in err
        assert "a C-level runtime line" not in err, err  # the runtime's kind of line: still off the terminal
        assert "\u2060" not in err + out  # the mark that tells the user's lines apart never shows


@pytest.mark.slow  # one more mobilize process (about 8 s)
def test_optimize_says_which_log_holds_the_models_lines(run_cli_process, tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    code, out, err = run_cli_process("optimize", f"{tmp_path}/m.py:Loud", "--input_dims", "1,3,16,16", "--recipe",
                                     "onnx-fp32", "-o", tmp_path / "o")
    assert code == 0, err
    log = tmp_path / "o" / "logs" / "optimize.log"
    assert "[W:onnxruntime: my own message]" in log.read_text() and "\u2060" not in log.read_text()
    assert f"are in {log}" in out


def test_compare_says_where_the_models_lines_went(run_cli_process, tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    out_dir = tmp_path / "c"
    code, out, err = run_cli_process("compare", f"{tmp_path}/m.py:Loud", "--input_dims", "1,3,16,16", "--variant",
                                     "eager-fp32", "--rounds", "2", "--time-budget", "1", "-o", out_dir)
    assert code == 0, err
    logs = "".join(p.read_text() for p in (out_dir / "logs").glob("*.log"))
    assert "[W:onnxruntime: my own message]" in logs
    assert f"are in {out_dir / 'logs'}, one file per stage" in out


def test_a_native_runtimes_capture_keeps_the_users_lines(tmp_path):
    """ExecuTorch's and LiteRT's runs capture fd 2 and drop their C++ log lines: a line the user's code prints
    meanwhile passes, whatever it says, and carries no mark into a log file."""
    import subprocess
    import sys

    script = tmp_path / "user.py"
    script.write_text("import os, sys\n"
                      "from mobilize.runtimes.native_stderr import filtered_stderr\n"
                      "with filtered_stderr(['[W:onnxruntime:']):\n"
                      "    print('[W:onnxruntime: my own message]', file=sys.stderr)\n"
                      "    os.write(2, b'[W:onnxruntime:, graph.cc:1] a C-level runtime line\\n')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "[W:onnxruntime: my own message]\n"
