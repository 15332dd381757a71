"""optimize without --data verifies on a couple of seeded random inputs: the result says how weak that is, in a
WARNING line that names the count and the fix (#40 item 13)."""

from __future__ import annotations

import json

import numpy as np


def test_optimize_without_data_warns_that_random_inputs_prove_little(run_cli, tmp_path):
    code, out, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", "onnx-fp32", "-o", tmp_path / "o",
                             "--json", tmp_path / "r.json")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("WARNING:"))
    assert "verified on 2 seeded random input(s) only (no --data)" in line and "give --data" in line
    assert "rule verify-random-inputs" in line
    assert json.loads((tmp_path / "r.json").read_text())["warnings"] == [line]


def test_optimize_with_data_does_not(run_cli, tmp_path):
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(0).random((4, 3, 32, 32), dtype=np.float32))
    code, out, err = run_cli("optimize", "zoo:conv_bn_relu", "--recipe", "onnx-fp32", "--input_dims", "1,3,32,32",
                             "--data", tmp_path / "x.npz", "-o", tmp_path / "o")
    assert code == 0, err
    assert "WARNING: each file was verified" not in out
