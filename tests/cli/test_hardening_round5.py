"""Issue #47 (hardening, fifth round), the items that are not about decoders: ``--input`` and ``.npz`` values, children
a metric leaves, interrupts during start-up, model output to fd 2, a metric that deletes the results, options that do
nothing, a metric's time limit and three messages - each through the real command in its own process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.cli.test_hardening import ROOT, all_dead, children, start
from tests.conftest import assert_one_line_error

LINEAR = """
import torch

class Lin(torch.nn.Module):
    input_specs = [(1, 16)]

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(x)
"""

VAD = """
import torch

class Vad(torch.nn.Module):
    input_specs = [(1, 32)]

    def forward(self, x, sr: int = 8000):
        return x * (2.0 if sr == 16000 else 1.0)
"""


def onnx_file(path, inputs: dict[str, tuple[int, list[int]]]) -> str:
    """An ONNX file whose output is its inputs as float, concatenated on axis 1 (``inputs``: name -> (element type,
    shape)); a rank-0 input is multiplied in instead."""
    import onnx
    from onnx import TensorProto, helper

    nodes, tensors = [], []
    for name, (elem, shape) in inputs.items():
        nodes.append(helper.make_node("Cast", [name], [f"{name}_f"], to=TensorProto.FLOAT))
        tensors.append(f"{name}_f")
    rows = [t for t, (_, shape) in zip(tensors, inputs.values()) if shape]
    scalars = [t for t, (_, shape) in zip(tensors, inputs.values()) if not shape]
    nodes.append(helper.make_node("Concat", rows, ["cat"], axis=1))
    last = "cat"
    for k, scalar in enumerate(scalars):
        nodes.append(helper.make_node("Mul", [last, scalar], [f"mul{k}"]))
        last = f"mul{k}"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, e, s) for n, (e, s) in inputs.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


# -- item 4: every --input value is checked for range -----------------------------------------------------------
@pytest.mark.parametrize("elem, value, fragment", [
    ("INT64", "99999999999999999999999", "is an int, which every file keeps in 64 bits: -9223372036854775808 to "),
    ("INT64", "1e300", "is an int, which every file keeps in 64 bits"),
    ("INT32", "3000000000", "input 'k' of {path} is int32, and 3000000000 is outside int32 (-2147483648 to "),
    ("FLOAT", "1e300", "is float32, and 1e+300 is outside float32"),
])
def test_an_input_value_its_onnx_input_cannot_hold_is_one_line(run_cli_process, tmp_path, elem, value, fragment):
    from onnx import TensorProto

    path = onnx_file(tmp_path / "k.onnx", {"x": (TensorProto.FLOAT, [1, 4]), "k": (getattr(TensorProto, elem), [])})
    code, _, err = run_cli_process("bench", path, "--input", f"k={value}", "--iter", "2", "--warmup", "0")
    assert_one_line_error(code, err, "--input k=", fragment.format(path=path))


def test_an_int_past_64_bits_for_a_pytorch_forward_is_one_line(run_cli_process, tmp_path):
    (tmp_path / "vad.py").write_text(VAD)
    code, _, err = run_cli_process("bench", f"{tmp_path / 'vad.py'}:Vad", "--input", "sr=99999999999999999999999",
                                   "--iter", "2", "--warmup", "0")
    assert_one_line_error(code, err, "--input sr=99999999999999999999999: the forward's 'sr' is an int, which every "
                                     "file keeps in 64 bits")


# -- item 5: every .npz array is checked for rank and range ------------------------------------------------------
@pytest.mark.parametrize("arrays, fragment", [
    ({"x": np.float32(1.0)}, "array 'x' is 0-d (the single value 1.0); an .npz holds its samples along the first axis"),
    ({"x0": np.zeros((4, 16), np.float32), "x1": np.int64(3)}, "array 'x1' is 0-d"),
    ({"x": np.zeros((4, 16), np.float32), "y": np.int64(3)}, "array 'y' is 0-d"),
    ({"x": np.full((4, 16), 1e300)}, "array 'x' feeds a float input, and 1e+300 is outside float32"),
])
@pytest.mark.parametrize("command", ["bench", "compare"])
def test_an_npz_array_without_samples_or_out_of_range_is_one_line(run_cli_process, tmp_path, arrays, fragment,
                                                                   command):
    (tmp_path / "lin.py").write_text(LINEAR)
    np.savez(tmp_path / "d.npz", **arrays)
    extra = ("--iter", "2", "--warmup", "0") if command == "bench" else ("--plan", "quick", "-o", tmp_path / "o")
    code, _, err = run_cli_process(command, f"{tmp_path / 'lin.py'}:Lin", "--data", tmp_path / "d.npz", *extra)
    assert_one_line_error(code, err, fragment)


def test_an_npz_int_array_past_its_int32_input_is_one_line(run_cli_process, tmp_path):
    from onnx import TensorProto

    path = onnx_file(tmp_path / "ids.onnx", {"ids": (TensorProto.INT32, [1, 4])})
    np.savez(tmp_path / "d.npz", ids=np.full((2, 1, 4), 2**40, np.int64))
    code, _, err = run_cli_process("bench", path, "--data", tmp_path / "d.npz", "--iter", "2", "--warmup", "0")
    assert_one_line_error(code, err, "array 'ids' feeds a int32 input, and 1099511627776 is outside int32")


# -- item 14: shapes and flags named as they are ------------------------------------------------------------------
def test_samples_stored_as_whole_inputs_of_a_batch_of_one_are_benched(run_cli_process, tmp_path):
    """(4,1,16) for a (1,16) model: four samples, each a whole input (was: refused, printing two equal shapes)."""
    (tmp_path / "lin.py").write_text(LINEAR)
    np.savez(tmp_path / "d.npz", x=np.random.default_rng(0).random((4, 1, 16), np.float32))
    code, out, err = run_cli_process("bench", f"{tmp_path / 'lin.py'}:Lin", "--data", tmp_path / "d.npz", "--iter",
                                     "2", "--warmup", "0")
    assert code == 0, err
    assert f"input data:{tmp_path / 'd.npz'}" in out


def test_samples_that_do_not_fit_name_the_dimension_that_differs(run_cli_process, tmp_path):
    (tmp_path / "lin.py").write_text(LINEAR)
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 1, 17), np.float32))
    code, _, err = run_cli_process("bench", f"{tmp_path / 'lin.py'}:Lin", "--data", tmp_path / "d.npz")
    assert_one_line_error(code, err, "samples of shape (1,17), but the model input is (1,16) float: dimension 1 is "
                                     "17 where the input has 16")


def test_a_zero_size_state_input_is_a_known_shape_not_a_dynamic_one(run_cli_process, tmp_path):
    """A state of (1,0) (an empty cache at the first step) beside a (1,4) input: benched as declared (was: "inputs
    with dynamic dimensions: x [1, 4]; state [1, 0]")."""
    from onnx import TensorProto

    path = onnx_file(tmp_path / "s.onnx", {"x": (TensorProto.FLOAT, [1, 4]), "state": (TensorProto.FLOAT, [1, 0])})
    code, out, err = run_cli_process("bench", path, "--iter", "2", "--warmup", "0")
    assert code == 0, err
    assert "Microseconds per iter" in out


def test_a_dynamic_input_is_listed_alone(run_cli_process, tmp_path):
    from onnx import TensorProto

    path = onnx_file(tmp_path / "d.onnx", {"x": (TensorProto.FLOAT, [1, 4]), "state": (TensorProto.FLOAT, [1, "n"])})
    code, _, err = run_cli_process("bench", path, "--iter", "2", "--warmup", "0")
    assert_one_line_error(code, err, "has inputs with dynamic dimensions: state [1, 'n'] (give --input_dims")
    assert "x [1, 4]" not in err


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_perplexity_budget_that_is_not_finite_names_the_flag(run_cli_process, tmp_path, value):
    code, _, err = run_cli_process("compare", "zoo:tiny_lm", f"--max-ppl-increase={value}", "-o", tmp_path / "o")
    assert_one_line_error(code, err, f"--max-ppl-increase must be a finite number, got {value}")
    assert "policy" not in err


# -- item 10: an option that would do nothing is refused ---------------------------------------------------------
@pytest.mark.parametrize("flags, fragment", [
    (("--prompt-len", "8"), "--prompt-len 8: only with --task generation"),
    (("--gen-len", "4"), "--gen-len 4: only with --task generation"),
])
def test_token_lengths_without_task_generation_are_refused(run_cli_process, flags, fragment):
    code, _, err = run_cli_process("bench", "zoo:conv_bn_relu", "--input_dims", "1,3,16,16", *flags)
    assert_one_line_error(code, err, fragment)


@pytest.mark.parametrize("argv, flag", [
    (("compare", "zoo:conv_bn_relu", "--frames", ""), "--frames"),
    (("compare", "zoo:conv_bn_relu", "--frames="), "--frames"),
    (("bench", "zoo:conv_bn_relu", "--frames", " "), "--frames"),
    (("compare", ""), "MODEL"),
    (("compare", "zoo:conv_bn_relu", "--data", ""), "--data"),
])
def test_an_empty_value_is_refused_not_read_as_not_given(run_cli_process, tmp_path, argv, flag):
    out = tmp_path / "o"
    code, _, err = run_cli_process(*argv, "-o" if argv[0] == "compare" else "--json", out)
    assert_one_line_error(code, err, f"{flag} is empty")
    assert not out.exists()


# -- item 7: an interrupt in the first second: one line, never a traceback ----------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_while_bench_starts_is_one_line_at_once(signum):
    """Sent 0.05-1.0 s after start, while the CLI's modules and torch import: a KeyboardInterrupt raised inside an
    import printed a traceback, was lost (the bench then ran on) or ended the process by SIGINT after "interrupted"."""
    for delay_s in (0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0):
        proc = start("bench", "zoo:conv_bn_relu", "--input_dims", "1,3,16,16", "--iter", "1000000000")
        time.sleep(delay_s)
        workers = children(proc.pid)
        os.kill(proc.pid, signum)
        sent = time.monotonic()
        try:
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:  # a lost interrupt must not leave a bench spinning
                proc.kill()
                proc.wait()
        took_s = time.monotonic() - sent
        if proc.returncode != 130:  # before any code of mobilize ran (the interpreter's start-up, or the exec above):
            # Python's own handling, which mobilize cannot change - but no frame of mobilize's may be in it
            assert proc.returncode in (-signum, 1) and "/mobilize/" not in err, (delay_s, proc.returncode, err)
        else:
            assert (proc.returncode, err.strip().splitlines()) == (130, ["mobilize: interrupted"]), (delay_s, err)
        assert took_s < 2, f"exited {took_s:.1f} s after the signal sent at {delay_s} s"
        assert all_dead(workers + children(proc.pid))


CUT_IMPORT = (
    "import runpy, sys\n"
    "class Cut:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'mobilize.cli.main':\n"
    "            raise KeyboardInterrupt\n"
    "sys.meta_path.insert(0, Cut())\n"
    "sys.argv = ['mobilize', 'list', 'recipes']\n"
    "runpy.run_module('mobilize', run_name='__main__', alter_sys=True)\n")


def test_an_interrupt_inside_the_clis_first_import_is_one_line():
    """``python -m mobilize`` with the interrupt raised inside ``from mobilize.cli.main import main`` - before main()
    installs its handler, the window a signal 50 ms after start hit on a slower CPU - printed Python's traceback
    through mobilize's __main__.py and ended by SIGINT."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-c", CUT_IMPORT], capture_output=True, text=True, env=env, timeout=60)
    assert (proc.returncode, proc.stderr.splitlines()) == (130, ["mobilize: interrupted"]), proc.stderr


LAUNCHER = ROOT / ".venv" / "bin" / "mobilize"
EXEC_WITH_SIGINT = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n")


def _python_started(pid: int) -> bool:
    """Whether ``pid`` is the interpreter the launcher started (its command line holds the launcher's code)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"from mobilize.cli.main import main" in fh.read()
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_during_pythons_own_start_up_is_one_line(signum):
    """The window before any code of mobilize runs (Python's start-up, site, the first imports: pip's script printed
    a KeyboardInterrupt traceback or ended by the signal there): .venv/bin/mobilize, the launcher scripts/setup.sh
    compiles, starts Python with both signals blocked, and mobilize unblocks them once its handler is in place."""
    if LAUNCHER.read_bytes()[:4] != b"\x7fELF":
        pytest.skip(f"{LAUNCHER} is pip's Python script (no C compiler when scripts/setup.sh ran)")
    for delay_s in (0.0, 0.002, 0.005, 0.01, 0.02, 0.04):
        proc = subprocess.Popen([sys.executable, "-c", EXEC_WITH_SIGINT, str(LAUNCHER), "list"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 30
        while not _python_started(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.0005)
        time.sleep(delay_s)
        os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=30)
        assert (proc.returncode, err.strip().splitlines()) == (130, ["mobilize: interrupted"]), (delay_s, err)


SLOW_IMPORT = """
import os, signal, sys, threading, time
sys.path.insert(0, sys.argv[1])
from mobilize.core import interrupts
interrupts.install()
if sys.argv[2] == "working":
    interrupts.work_begins()
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
try:
    import slow_module  # noqa: F401
    time.sleep(30)
    print("the interrupt was lost", flush=True)
except KeyboardInterrupt:
    print("interrupted; imported whole:", getattr(sys.modules.get("slow_module"), "DONE", False), flush=True)
    sys.exit(130)
"""


@pytest.mark.parametrize("state", ["starting", "working"])
def test_an_interrupt_inside_an_import_never_lands_in_it(tmp_path, state):
    """Before any work the process ends at once with the one line; once it has made something to clean up the
    interrupt waits for the import to end, then arrives as a KeyboardInterrupt."""
    (tmp_path / "slow_module.py").write_text("import time\ntime.sleep(1.0)\nDONE = True\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-c", SLOW_IMPORT, str(tmp_path), state], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    if state == "starting":
        assert (proc.stdout, proc.stderr) == ("", "mobilize: interrupted\n")
    else:
        assert proc.stdout.splitlines() == ["interrupted; imported whole: True"], proc.stdout


# -- items 6, 9 and 12: a metric's children, its deletions and its time are its own -------------------------------
METRICS = """
import os, time

def forks(outputs, reference, labels):
    pid = os.fork()
    if pid == 0:
        os.execvp("sleep", ["sleep", "300"])
    with open(os.environ["FORKED"], "a") as fh:
        fh.write(f"{pid}\\n")
    return 1.0

def deletes(outputs, reference, labels):
    for root, _, files in os.walk(os.environ["OUT"]):
        for name in files:
            if name.endswith(".pt"):
                os.remove(os.path.join(root, name))
    return 1.0

def hangs(outputs, reference, labels):
    while True:
        time.sleep(1)
"""


def compare_with_metric(tmp_path, metric: str, *extra: str, env: dict | None = None) -> tuple[int, str, str]:
    (tmp_path / "lin.py").write_text(LINEAR)
    (tmp_path / "metrics.py").write_text(METRICS)
    exe = os.path.join(os.path.dirname(sys.executable), "mobilize")
    # one variant: the metric runs in the reference's job and in that variant's check (the quick plan's five
    # variants took 40 s here, and under a loaded suite the order of their checks and deletions varied)
    proc = subprocess.run([exe, "compare", f"{tmp_path / 'lin.py'}:Lin", "--plan", "quick", "--variant",
                           "torchscript-frozen", "--accuracy-samples", "2",
                           "--metric", f"{tmp_path / 'metrics.py'}:{metric}", "-o", str(tmp_path / "out"), *extra],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, **(env or {})))
    return proc.returncode, proc.stdout, proc.stderr


def test_what_a_metric_forks_ends_with_its_worker(tmp_path):
    """Each call forked a `sleep 300`; they were left running, re-parented to init, after compare exited."""
    forked = tmp_path / "forked"
    code, _, err = compare_with_metric(tmp_path, "forks", env={"FORKED": str(forked)})
    assert code == 0, err
    pids = [int(p) for p in forked.read_text().split()]
    assert pids and all_dead(pids, timeout_s=5), [p for p in pids if os.path.exists(f"/proc/{p}")]


def test_files_a_metric_deletes_are_not_reported_as_written(tmp_path):
    code, out, err = compare_with_metric(tmp_path, "deletes", env={"OUT": str(tmp_path / "out")})
    error = err.strip().splitlines()[-1]  # after the note --metric always gives
    assert code == 2 and "Traceback" not in err and error.startswith("mobilize: error: 1 file(s) "), err
    assert "report.json names were deleted during the run" in error and "torchscript-frozen.pt" in error
    assert "wrote " not in out


def test_a_metric_that_never_returns_is_named_with_the_limit_in_force(tmp_path):
    """Blamed on "the float reference" with "try --timeout 32", after a note promising a 120 s limit."""
    code, _, err = compare_with_metric(tmp_path, "hangs", "--timeout", "8")
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err, err
    assert "under a 8 s limit (--timeout, the limit of the stage it runs in)" in lines[0], lines[0]
    assert f"--metric {tmp_path / 'metrics.py'}:hangs gave no answer within 8 s (--timeout)" in lines[-1], lines[-1]
    assert "try --timeout" not in lines[-1]


# -- item 8: what the model writes to fd 2 in a runtime's format is kept, and the run says where -------------------
NOISY = """
import os
import torch

class Noisy(torch.nn.Module):
    input_specs = [(1, 16)]

    def __init__(self):
        super().__init__()
        os.write(2, b"[W1127 12:00:00.000 Quantizer.cpp:111] Warning: calibration table my_table.bin loaded\\n")
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(x)
"""


@pytest.mark.parametrize("command", [("bench", "--iter", "2", "--warmup", "0"), ("lint", "--target", "none")])
def test_a_model_line_in_a_runtime_log_format_is_kept_and_said(run_cli_process, tmp_path, command):
    (tmp_path / "noisy.py").write_text(NOISY)
    code, out, err = run_cli_process(command[0], f"{tmp_path / 'noisy.py'}:Noisy", *command[1:])
    assert code == 0, err
    assert "were kept off the terminal" not in out  # a note, on stderr (issue #66 item 5): stdout holds results
    note = next(line for line in err.splitlines() if "were kept off the terminal" in line)
    path = note.rpartition("they are in ")[2]
    assert "calibration table my_table.bin loaded" in open(path).read()
    os.remove(path)
