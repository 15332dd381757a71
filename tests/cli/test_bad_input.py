"""Every bad input: one clear line on stderr, exit code 2, no traceback (unless --debug), and nothing
left on disk but what the row says.

The cases are a table: each row is the command, the exit code, the message fragments, and what the
run may add to its folder.  In a command, ``{tmp}`` is the row's own folder, ``{art:FMT}`` an artifact
of the shared tiny model (tests/conftest.py), ``{cut:FMT:P}`` a copy of it cut to P percent of its
length.  A new way to go wrong is a new row.
"""

from __future__ import annotations

import dataclasses
import os
import re

import pytest
import torch

from tests.conftest import assert_one_line_error, tiny_input, tiny_model

BENCH = ("bench", "zoo:conv_bn_relu", "--input_dims", "1,3,16,16", "--iter", "2", "--warmup", "0")
COMPARE = ("compare", "zoo:conv_bn_relu", "--input_dims", "1,3,16,16", "-o", "{tmp}/out")
TUNE = ("tune", "zoo:conv_bn_relu", "--input_dims", "1,3,16,16", "--data", "digits:test", "-o", "{tmp}/out")

MODELS = """
import torch

class InitRaises(torch.nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("no weights file here")

class ReturnsNone(torch.nn.Module):
    input_specs = [(1, 3, 16, 16)]

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        self.conv(x)

class NotAModel:
    pass

class ForwardRaises(torch.nn.Module):
    input_specs = [(1, 3, 16, 16)]

    def forward(self, x):
        raise ValueError("this forward always fails")

class FourClasses(torch.nn.Module):
    input_specs = [(1, 3, 16, 16)]

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)

    def forward(self, x):
        return self.fc(x.mean((2, 3)))
"""


DEVICE_LOG = """Starting benchmark.
Running warmup runs.
Main runs.
PyTorchObserver {"type": "NET", "unit": "us", "metric": "latency", "value": "8123"}
PyTorchObserver {"type": "NET", "unit": "us", "metric": "latency", "value": "8097"}
Main run finished. Microseconds per iter: 8110. Iters per second: 123.3
"""
"""One speed_benchmark_torch run; rows of ``bench --from-log`` change one line of it."""


def device_log(old: str, new: str) -> str:
    assert old in DEVICE_LOG
    return DEVICE_LOG.replace(old, new, 1)


def png_header(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` pixels (and holds none): PIL checks the size when it opens it."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IEND", b""))


@dataclasses.dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    fragments: tuple[str, ...]
    code: int = 2
    files: tuple[tuple[str, bytes | str], ...] = ()
    """Files the row needs, created in its folder first (relative path, content)."""
    left: tuple[str, ...] = ()
    """What the run may add to the row's folder (relative paths); everything else stays as it was."""


CASES = {
    # -- model references and files ------------------------------------------------------------------
    "missing-file": Case(("bench", "{tmp}/nope.pt"), ("model file not found", "nope.pt")),
    "unknown-suffix": Case(("bench", "{tmp}/model.mlmodel"), ("unknown model file suffix '.mlmodel'", ".onnx"),
                           files=(("model.mlmodel", b"x"),)),
    "unknown-zoo-name": Case(("bench", "zoo:mobilenet_v3"), ("unknown zoo model 'mobilenet_v3'",
                                                             "did you mean: mobilenet_v2")),
    "not-a-module": Case(("bench", "{tmp}/m.py:NotAModel"), ("not a torch.nn.Module",), files=(("m.py", MODELS),)),
    "missing-class": Case(("bench", "{tmp}/m.py:Missing"), ("has no 'Missing'", "NotAModel"), files=(("m.py", MODELS),)),
    "init-raises": Case(("bench", "{tmp}/m.py:InitRaises", "--input_dims", "1,3,16,16"),
                        ("building", "m.py:InitRaises' failed: ValueError: no weights file here"),
                        files=(("m.py", MODELS),)),
    "sys-exit-on-import": Case(("bench", "{tmp}/exits.py:Net", "--input_dims", "1,3,16,16"),
                               ("importing", "exits.py failed: it called sys.exit(3)", "__main__"),
                               files=(("exits.py", "import sys\nsys.exit(3)\n"),)),
    "optimize-forward-returns-none": Case(("optimize", "{tmp}/m.py:ReturnsNone", "--recipe", "torchscript-fp32",
                                           "-o", "{tmp}/out"),
                                          ("the forward of", "m.py:ReturnsNone' returned no tensor"),
                                          files=(("m.py", MODELS),)),
    "optimize-unknown-zoo-name": Case(("optimize", "zoo:nope", "-o", "{tmp}/out"), ("unknown zoo model 'nope'",)),
    "optimize-onnx-wrong-input-dims": Case(("optimize", "zoo:conv_bn_relu", "--recipe", "onnx-fp32", "--input_dims",
                                            "1,10", "-o", "{tmp}/out"),
                                           ("[run] the model failed on inputs [(1,10) float32]",)),
    # -- corrupt and truncated files: checked before any runtime reads them ---------------------------
    **{f"random-bytes-{suffix}": Case(("bench", f"{{tmp}}/corrupt{suffix}", "--input_dims", "1,3,32,32"), fragments,
                                      files=((f"corrupt{suffix}", os.urandom(4096)),))
       for suffix, fragments in [
           (".pt", ("not a valid TorchScript file",)), (".ptl", ("not a valid TorchScript file",)),
           (".pte", ("not an ExecuTorch program",)), (".bpte", ("not an ExecuTorch program",)),
           (".onnx", ("not a valid ONNX model", "truncated or corrupt")),
           (".pt2", ("not a valid ExportedProgram", "truncated or corrupt"))]},
    **{f"truncated-{fmt}-{pct}": Case(("bench", f"{{cut:{fmt}:{pct}}}", "--iter", "2"), ("truncated or corrupt",))
       for fmt in ("torchscript", "lite", "exported_program", "executorch", "bpte", "onnx") for pct in (10, 50, 99)},
    "truncated-bpte-bundled-input": Case(("bench", "{cut:bpte:99}", "--use_bundled_input", "0"),
                                         ("truncated or corrupt",)),
    "pt-renamed-pt2": Case(("bench", "{tmp}/model.pt2"), ("not a valid ExportedProgram", "without an exported program"),
                           files=(("model.pt2", "{art:torchscript}"),)),
    # -- input specs -----------------------------------------------------------------------------------
    "wrong-rank": Case(("bench", "zoo:conv_bn_relu", "--input_dims", "1,3", "--iter", "1"),
                       ("the model failed on inputs [(1,3) float32]",)),
    "bad-dims": Case((*BENCH[:2], "--input_dims", "1,3,x"), ("bad --input_dims '1,3,x'",)),
    "negative-dims": Case((*BENCH[:2], "--input_dims", "1,-3,4"), ("dimensions must be positive",)),
    "empty-dims": Case((*BENCH[:2], "--input_dims", ""), ("--input_dims is empty",)),
    "bad-type": Case((*BENCH[:2], "--input_dims", "1,3,8,8", "--input_type", "quaternion"),
                     ("bad --input_type 'quaternion'", "int64")),
    "type-count": Case((*BENCH[:2], "--input_dims", "1,3,8,8;1,10", "--input_type", "float;int64;uint8"),
                       ("--input_type has 3 entries but --input_dims has 2",)),
    "input-too-big-for-memory": Case((*BENCH[:2], "--input_dims", "1,3,600000,600000"),
                                     ("cannot allocate 4320.0 GB for the inputs [(1,3,600000,600000) float]",
                                      "give smaller --input_dims")),
    # -- data sources ------------------------------------------------------------------------------------
    "npz-random-bytes": Case((*BENCH, "--data", "{tmp}/r.npz"), ("not a valid .npz file",),
                             files=(("r.npz", os.urandom(3000)),)),
    "data-path-missing": Case((*BENCH, "--data", "{tmp}/no/such/dir"), ("data not found", "no/such/dir")),
    "data-npz-missing": Case((*BENCH, "--data", "{tmp}/gone.npz"), ("data file not found", "gone.npz")),
    "data-unknown-name": Case((*BENCH, "--data", "digitz"), ("unknown data source 'digitz'",)),
    "data-bad-count": Case((*BENCH, "--data", "sample-photos:many"), ("bad data source 'sample-photos:many'",)),
    # -- options: one rule in every command ---------------------------------------------------------------
    "unknown-runtime": Case((*BENCH, "--runtime", "onnxrt"), ("unknown runtime 'onnxrt'", "did you mean: onnxruntime")),
    "bench-threads-0": Case((*BENCH, "--threads", "0"), ("--threads must be between 1 and",)),
    "bench-threads-1000": Case((*BENCH, "--threads", "1000"), ("--threads must be between 1 and", "cores")),
    "bench-pthreadpool-0": Case((*BENCH, "--pthreadpool_size", "0"), ("--pthreadpool_size must be between 1 and",)),
    "bench-threads-disagree": Case((*BENCH, "--threads", "1", "--pthreadpool_size", "2"), ("disagree",)),
    "bench-iter-0": Case((*BENCH, "--iter", "0"), ("--iter must be at least 1",)),
    "io-binding-not-onnxruntime": Case((*BENCH, "--io-binding"), ("--io-binding is for onnxruntime only",
                                                                  "runtime 'eager'")),
    "compare-threads-0": Case((*COMPARE, "--threads", "0"), ("--threads must be between 1 and",)),
    "compare-threads-1000": Case((*COMPARE, "--threads", "1000"), ("--threads must be between 1 and",)),
    "compare-timeout-0": Case((*COMPARE, "--timeout", "0"), ("--timeout must be more than 0 seconds",)),
    "compare-accuracy-samples-0": Case((*COMPARE, "--accuracy-samples", "0"), ("--accuracy-samples must be at least 1",)),
    "compare-rounds-0": Case((*COMPARE, "--rounds", "0"), ("--rounds must be at least 1",)),
    # -- outputs: checked before any work --------------------------------------------------------------
    "json-in-proc": Case((*BENCH, "--json", "/proc/x.json"), ("cannot write --json /proc/x.json",)),
    "json-is-a-folder": Case((*BENCH, "--json", "{tmp}/folder"), ("--json", "folder is a folder"),
                             files=(("folder/keep.txt", "mine"),)),
    "json-under-a-file": Case((*BENCH, "--json", "{tmp}/file.txt/x.json"), ("cannot create --json folder",
                                                                           "is a file"),
                              files=(("file.txt", "x"),)),
    "optimize-output-is-a-file": Case(("optimize", "zoo:conv_bn_relu", "-o", "{tmp}/taken"), ("is a file",),
                                      files=(("taken", "x"),)),
    "optimize-json-in-proc": Case(("optimize", "zoo:conv_bn_relu", "-o", "{tmp}/out", "--json", "/proc/x.json"),
                                  ("cannot write --json /proc/x.json",)),
    "compare-output-in-proc": Case(("compare", "zoo:conv_bn_relu", "-o", "/proc/x/out"),
                                   ("cannot create -o folder /proc/x/out",)),
    # -- names that become paths (issue #29 item 1): one check, nothing written outside -o ------------------
    **{f"optimize-recipe-name-{key}": Case(("optimize", "zoo:conv_bn_relu", "--recipe", "{tmp}/r.yaml", "-o",
                                            "{tmp}/a/out"), ("recipe name", "cannot be used in a file name", why),
                                           files=(("r.yaml", f'name: "{name}"\nexports: [torchscript]\n'),))
       for key, name, why in [("traversal", "x/../../evil", "holds '/'"), ("absolute", "/tmp/evil", "holds '/'"),
                              ("dotdot", "..", "'.' or '..'"), ("dash", "-rf", "starts with '-'"),
                              ("nul", "a\\0b", "NUL byte"), ("empty", "", "empty")]},
    **{f"compare-variant-name-{key}": Case(("compare", "zoo:conv_bn_relu", "--plan", "{tmp}/p.yaml", "-o",
                                            "{tmp}/a/out"), ("variant name", "cannot be used in a file name", why),
                                           files=(("p.yaml", f'variants:\n  - name: "{name}"\n    exports: [onnx]\n'),))
       for key, name, why in [("traversal", "../../evil", "holds '/'"), ("empty", "", "empty"),
                              ("dash", "-x", "starts with '-'"), ("nul", "v\\0", "NUL byte")]},
    "optimize-model-stem-dash": Case(("optimize", "{tmp}/-m.onnx", "--recipe", "onnx-fp32", "-o", "{tmp}/a/out"),
                                     ("stem of model", "starts with '-'"), files=(("-m.onnx", "{art:onnx}"),)),
    # -- budgets: bounds checked in the accuracy Policy (issue #29 item 6) ---------------------------------
    **{f"{cmd}-max-drop-{value}": Case((*argv, "--max-drop", value), ("--max-drop must be a number of top-1 points "
                                                                       "from 0 to 100", f"got {want}"))
       for cmd, argv in [("tune", TUNE), ("compare", COMPARE)]
       for value, want in [("nan", "nan"), ("inf", "inf"), ("1000", "1000.0"), ("-1", "-1.0")]},
    "compare-min-cosine-nan": Case((*COMPARE, "--min-cosine", "nan"), ("--min-cosine must be in (0, 1]",)),
    # -- tune and lint check everything before any work (issue #29 items 7, 8) ---------------------------
    "tune-samples-0": Case((*TUNE, "--max-drop", "1", "--samples", "0"), ("--samples must be at least 1, got 0",)),
    "tune-samples-negative": Case((*TUNE, "--max-drop", "1", "--samples", "-3"), ("--samples must be at least 1",)),
    "tune-unknown-runtime": Case((*TUNE, "--max-drop", "1", "--runtimes", "tflite"),
                                 ("tune does not search runtime 'tflite'",)),
    "tune-zero-sample-npz": Case(("tune", "zoo:conv_bn_relu", "--input_dims", "1,3,16,16", "--data", "{tmp}/z.npz",
                                  "--min-cosine", "0.9", "-o", "{tmp}/out"), ("z.npz holds no samples",),
                                 files=(("z.npz", "{npz:0}"),)),
    "tune-unlabelled-with-max-drop": Case(("tune", "zoo:conv_bn_relu", "--input_dims", "1,3,16,16", "--data",
                                           "sample-photos:4", "--max-drop", "1", "-o", "{tmp}/out"),
                                          ("--max-drop needs labelled samples", "has no labels")),
    "tune-empty-calibration-folder": Case((*TUNE, "--max-drop", "1", "--calibration", "{tmp}/cal"),
                                          ("data folder", "cal has no images"), files=(("cal/readme.txt", "x"),)),
    "tune-json-in-proc": Case((*TUNE, "--max-drop", "1", "--json", "/proc/x.json"),
                              ("cannot write --json /proc/x.json",)),
    "tune-json-is-a-folder": Case((*TUNE, "--max-drop", "1", "--json", "{tmp}"), ("is a folder",)),
    "tune-not-a-pytorch-model": Case(("tune", "{art:onnx}", "--data", "digits:test", "--max-drop", "1", "-o",
                                      "{tmp}/out"), ("tune takes a PyTorch model",)),
    "tune-labels-outside-the-classes": Case(("tune", "{tmp}/m.py:FourClasses", "--data", "digits:test", "--max-drop",
                                             "1", "--samples", "8", "-o", "{tmp}/out"),
                                            ("has label 6, but the model gives 4 output value(s)",),
                                            files=(("m.py", MODELS),)),
    "tune-time-budget-before-any-candidate": Case((*TUNE, "--max-drop", "50", "--samples", "4", "--time-budget",
                                                   "0.001"), ("time budget (0.001) ran out before any candidate",),
                                                  # the report of what was tried; the empty tune-cache/ goes
                                                  left=("out", "out/tune-report.json", "out/tune-report.html")),
    "lint-json-in-proc": Case(("lint", "zoo:conv_bn_relu", "--json", "/proc/x.json"),
                              ("cannot write --json /proc/x.json",)),
    "lint-json-is-a-folder": Case(("lint", "zoo:conv_bn_relu", "--json", "{tmp}"), ("is a folder",)),
    "lint-forward-raises": Case(("lint", "{tmp}/m.py:ForwardRaises", "--target", "none"),
                                ("the model failed on inputs", "1,3,16,16", "this forward always fails"),
                                files=(("m.py", MODELS),)),
    "bench-data-decompression-bomb": Case((*BENCH, "--data", "{tmp}/photos"), ("cannot read image", "big.png",
                                                                               "decompression bomb"),
                                          files=(("photos/big.png", png_header(20000, 20000)),)),
    # -- device logs (issue #29 item 5): every number finite and not negative, every record JSON ------------
    "from-log-iters-per-second-inf": Case(("bench", "--from-log", "{tmp}/d.log", "--json", "{tmp}/r.json"),
                                          ("d.log line 6: Iters per second is \"inf\"", "not a positive finite"),
                                          files=(("d.log", device_log("123.3", "inf")),)),
    "from-log-us-per-iter-nan": Case(("bench", "--from-log", "{tmp}/d.log"), ("line 6: Microseconds per iter",),
                                     files=(("d.log", device_log("8110.", "nan.")),)),
    **{f"from-log-pep-{key}": Case(("bench", "--from-log", "{tmp}/d.log", "--json", "{tmp}/r.json"),
                                   ("d.log line 4", why), files=(("d.log", device_log('"value": "8123"}', value)),))
       for key, value, why in [("negative", '"value": "-8123"}', "latency is \"-8123\": not a finite number"),
                               ("nan", '"value": "NaN"}', "latency is \"NaN\""),
                               ("word", '"value": "fast"}', "latency is \"fast\""),
                               ("missing", '"unit": "us"}', "latency is null"),
                               ("list", '"value": [1, 2]}', "latency is [1, 2]"),
                               ("not-json", '"value": 8123,}', "the PyTorchObserver record is not JSON")]},
    "from-log-pep-no-record": Case(("bench", "--from-log", "{tmp}/d.log"), ("line 5", "without a {...} record"),
                                   files=(("d.log", device_log('PyTorchObserver {"type": "NET", "unit": "us", '
                                                               '"metric": "latency", "value": "8097"}',
                                                               "PyTorchObserver latency 8097")),)),
    # -- sweep (issue #29 item 9) ------------------------------------------------------------------------
    "sweep-max-retries-negative": Case(("sweep", "zoo:conv_bn_relu", "--max-retries", "-1", "-o", "{tmp}/out"),
                                       ("--max-retries must be at least 0, got -1",)),
    "sweep-ray-address-unreachable": Case(("sweep", "zoo:conv_bn_relu", "--executor", "ray:127.0.0.1:1", "-o",
                                           "{tmp}/out"), ("cannot reach the Ray cluster at 127.0.0.1:1",)),
    "failed-run-removes-the-folder-it-made": Case((*BENCH[:2], "--input_dims", "1,3,x", "--json",
                                                   "{tmp}/new/deeper/x.json"), ("bad --input_dims",)),
}


@pytest.fixture(scope="module")
def bpte(tmp_path_factory):
    """A bundled program of the tiny model (one case), built directly with ExecuTorch."""
    import warnings

    from mobilize.backends.executorch.bundled import build_bundled_program
    from mobilize.backends.executorch.bpte import BundledCase

    model, x = tiny_model(), tiny_input()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        manager = to_edge_transform_and_lower(torch.export.export(model, (x,)),
                                              partitioner=[XnnpackPartitioner()]).to_executorch()
    path = tmp_path_factory.mktemp("bpte") / "tiny.bpte"
    with torch.no_grad():
        path.write_bytes(build_bundled_program(manager, [BundledCase([x], [model(x)])]))
    return path


def snapshot(folder) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(run_cli, tmp_path, artifacts, bpte, name):
    case = CASES[name]
    files = {**artifacts, "bpte": bpte}
    for rel, content in case.files:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith("{art:"):
            content = files[content[5:-1]].read_bytes()
        elif isinstance(content, str) and content.startswith("{npz:"):  # an .npz of N samples of 3x16x16
            import io

            import numpy as np

            n, buffer = int(content[5:-1]), io.BytesIO()
            np.savez(buffer, x=np.zeros((n, 3, 16, 16), np.float32), y=np.zeros((n,), np.int64))
            content = buffer.getvalue()
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    def expand(arg: str) -> str:
        cut = re.fullmatch(r"\{cut:(\w+):(\d+)\}", arg)
        if cut:
            fmt, pct = cut.group(1), int(cut.group(2))
            data = files[fmt].read_bytes()
            path = tmp_path / f"cut-{pct}{files[fmt].suffix}"
            path.write_bytes(data[:len(data) * pct // 100])
            return str(path)
        if arg.startswith("{art:"):
            return str(files[arg[5:-1]])
        return arg.replace("{tmp}", str(tmp_path))

    argv = [expand(a) for a in case.argv]
    before = snapshot(tmp_path)
    code, _, err = run_cli(*argv)
    assert code == case.code, err
    assert_one_line_error(code, err, *case.fragments)
    assert "allow_pickle" not in err, "never suggest unsafe loading"
    after = snapshot(tmp_path)
    assert before <= after, f"removed: {before - after}"
    assert after - before == set(case.left), f"left on disk: {sorted(after - before)}"


def test_every_truncation_of_a_bundled_program_is_refused(bpte, tmp_path):
    """Not just 10/50/99 %: lengths all through the file, and every one of its last 256 bytes."""
    from mobilize.core.errors import UnsupportedModelError
    from mobilize.backends.executorch.pte import check_complete

    data = bpte.read_bytes()
    check_complete(bpte)
    cut = tmp_path / "cut.bpte"
    for n in [*range(0, len(data), max(1, len(data) // 200)), *range(max(0, len(data) - 256), len(data))]:
        cut.write_bytes(data[:n])
        with pytest.raises(UnsupportedModelError):
            check_complete(cut)


@pytest.mark.parametrize("fmt", ["executorch", "onnx"])
def test_input_spec_checked_against_artifact(run_cli_process, artifacts, fmt):
    code, _, err = run_cli_process("bench", artifacts[fmt], "--input_dims", "1,1,32,32", "--iter", "1")
    assert_one_line_error(code, err, "input 0 has shape (1,1,32,32) but the model expects (1,3,32,32)")


def test_input_spec_wrong_channels(run_cli):
    code, _, err = run_cli("bench", "zoo:mobilenet_v2", "--input_dims", "1,1,64,64", "--iter", "1")
    assert_one_line_error(code, err, "1,1,64,64", "expected input[1, 1, 64, 64] to have 3 channels")


def test_pickled_module_refused_without_consent(run_cli, tmp_path):
    path = tmp_path / "pickled.pt"
    torch.save(tiny_model(), path)
    code, _, err = run_cli("bench", path, "--input_dims", "1,3,32,32")
    assert_one_line_error(code, err, "pickled Python object", "arbitrary code", "--trust-pickle")
    code, out, err = run_cli("bench", path, "--input_dims", "1,3,32,32", "--trust-pickle", "--iter", "2")
    assert code == 0, err
    assert "Main run finished" in out


def test_pickled_state_dict_explained(run_cli, tmp_path):
    path = tmp_path / "weights.pt"
    torch.save(tiny_model().state_dict(), path)
    code, _, err = run_cli("bench", path, "--trust-pickle", "--input_dims", "1,3,32,32")
    assert_one_line_error(code, err, "holds a state_dict")


def test_dynamic_onnx_needs_input_dims(run_cli, tmp_path):
    path = tmp_path / "dyn.onnx"
    torch.onnx.export(tiny_model(), (torch.randn(1, 3, 32, 32),), str(path), dynamo=False,
                      input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    assert_one_line_error(*run_cli("bench", path)[::2], "dynamic dimensions", "x ['batch', 3, 32, 32]", "--input_dims")
    code, out, err = run_cli("bench", path, "--input_dims", "4,3,32,32", "--iter", "2")
    assert code == 0, err


def test_debug_shows_traceback(run_cli):
    code, _, err = run_cli("--debug", "bench", "zoo:mobilenet_v3")
    assert code == 2
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("mobilize: error:")
