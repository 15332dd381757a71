"""The arm64 check's host-side parts, without emulation: judging and flagging, the guard against a result
that did not come from aarch64, the one-line errors, and setup-arm64.sh's cannot-set-up path (exit 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from mobilize.arm64 import kind_of
from mobilize.arm64.verdict import check_outputs, flag, summary
from mobilize.core.errors import InternalError
from tests.conftest import assert_one_line_error

REPO = Path(__file__).resolve().parents[2]
ARM = {"machine": "aarch64", "qemu_cpu": "cortex-a76", "cpu_features": {"fp16": True, "dotprod": True,
                                                                         "i8mm": False}}


def _logits(seed: int, n: int = 32) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(1, 10, generator=g)] for _ in range(n)]


def test_same_verdict_is_not_flagged():
    ref = _logits(0)
    host = [[t + 1e-7 for t in s] for s in ref]
    arm = [[t - 1e-7 for t in s] for s in ref]
    check = check_outputs(arm, host, ref, None, "float", machine=ARM)
    assert check.verdict["outcome"] == check.host_verdict["outcome"] == "OK"
    assert not check.differs and flag(check.to_json()) == ""
    assert check.agreement["top1_agreement"] == 1.0 and check.agreement["sqnr_db"] > 100
    assert "DIFFERS" not in summary("v", check.to_json())


def test_a_different_arm64_verdict_is_flagged_with_its_rule():
    ref = _logits(0)
    arm = _logits(1)  # other numbers altogether: what a broken arm64 kernel gives
    check = check_outputs(arm, ref, ref, None, "float", machine=ARM)
    data = check.to_json()
    assert data["outcome"] == "MISMATCH" and data["host_outcome"] == "OK" and data["differs_from_host"]
    assert flag(data) == "arm64 MISMATCH, host OK"
    assert "rule float-sqnr" in data["verdict"]["reason"]
    assert "DIFFERS (arm64 MISMATCH, host OK)" in summary("onnx-fp32", data)
    assert data["agreement_with_host"]["top1_agreement"] < 0.5


def test_labelled_budget_decides_on_both_sides_alike():
    ref = _logits(0)
    labels = [int(s[0].argmax()) for s in ref]
    flipped = [[s[0].roll(1, dims=1)] for s in ref[:8]] + ref[8:]  # 8 of 32 answers changed: a 25-point drop
    check = check_outputs(flipped, ref, ref, labels, "quantized", machine=ARM)
    assert check.host_verdict["outcome"] == "OK"
    assert check.verdict["outcome"] in ("OVER_BUDGET", "MISMATCH") and check.differs


def test_a_result_not_from_aarch64_is_refused():
    ref = _logits(0)
    with pytest.raises(InternalError, match="not aarch64"):
        check_outputs(ref, ref, ref, None, "float", machine={**ARM, "machine": "x86_64"})


def test_kind_from_the_manifest_recipe():
    assert kind_of({"passes": [{"quantize": {"engine": "qnnpack"}}]}) == "quantized"
    assert kind_of({"exporter": {"executorch": {"fp16": True}}}) == "reduced"
    assert kind_of({"exporter": {"onnx": {}}}) == "float" and kind_of(None) == "float"


def test_verify_without_an_arm64_root_is_one_line(run_cli, monkeypatch, tmp_path):
    monkeypatch.setenv("MOBILIZE_ARM64_ROOT", str(tmp_path / "none"))
    (tmp_path / "model.onnx").write_bytes(b"")  # there (a missing file is said first), not read: the root is checked first
    code, _, err = run_cli("verify", tmp_path / "model.onnx", "--on", "arm64")
    assert_one_line_error(code, err, "cannot verify on arm64: no arm64 root at", "setup-arm64.sh")


def test_verify_unknown_cpu_model_is_one_line(run_cli, tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"")
    code, _, err = run_cli("verify", tmp_path / "model.onnx", "--on", "arm64", "--cpu", "cortex-a67")
    assert_one_line_error(code, err, "unknown arm64 CPU model 'cortex-a67'", "did you mean: cortex-a76")


def test_compare_verify_on_without_root_fails_before_any_work(run_cli, monkeypatch, tmp_path):
    monkeypatch.setenv("MOBILIZE_ARM64_ROOT", str(tmp_path / "none"))
    code, _, err = run_cli("compare", "--verify-on", "arm64", "-o", tmp_path / "out")
    assert_one_line_error(code, err, "cannot verify on arm64")
    assert not (tmp_path / "out").exists()


def _setup(env_extra: dict[str, str], user: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "MOBILIZE_ARM64_ROOT": "/nonexistent/arm64", **env_extra}
    script = REPO / "scripts" / "setup-arm64.sh"
    if not user:
        return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    # the unprivileged user may not reach the checkout (a clone in a 0700 folder such as mktemp -d's): it runs a
    # copy in a folder anyone can read (the script stops at its root check, before it needs the rest of the repo)
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "scripts" / "setup-arm64.sh"
        copy.parent.mkdir()
        shutil.copyfile(script, copy)
        for path in (Path(folder), copy.parent):
            path.chmod(0o755)
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(copy)]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, cwd="/")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="dropping to an unprivileged user needs root and util-linux's setpriv")
def test_setup_without_root_says_so_and_exits_2():
    proc = _setup({}, user=True)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("setup-arm64: cannot set up the arm64 root: needs root")
    assert not Path("/nonexistent/arm64").exists()


def test_setup_without_a_host_venv_says_so_and_exits_2():
    if os.geteuid() != 0:
        proc = _setup({})  # not root: the root check comes first, also one line and exit 2
        assert proc.returncode == 2 and "needs root" in proc.stderr
        return
    proc = _setup({"MOBILIZE_HOST_PYTHON": "/nonexistent/python"})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == ["setup-arm64: cannot set up the arm64 root: no host venv at /nonexistent/python (run "
                     "scripts/setup.sh first, or set MOBILIZE_HOST_PYTHON)"]


def test_bench_cpu_without_on_arm64_is_refused(run_cli, tmp_path):
    code, out, err = run_cli("bench", "zoo:conv_bn_relu", "--cpu", "max")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--on arm64" in err


def _debian_mirror(apt_etc: Path, env_mirror: str = "") -> subprocess.CompletedProcess:
    """setup-arm64.sh's debian_mirror function alone, reading apt's configuration from ``apt_etc``."""
    text = (REPO / "scripts" / "setup-arm64.sh").read_text()
    start = text.index("debian_mirror() {")
    function = text[start:text.index("\n}\n", start) + 3]
    env = {"PATH": os.environ["PATH"], "MOBILIZE_APT_ETC": str(apt_etc),
           **({"MOBILIZE_DEBIAN_MIRROR": env_mirror} if env_mirror else {})}
    return subprocess.run(["bash", "-c", function + "debian_mirror"], env=env, capture_output=True, text=True,
                          timeout=30)


def test_the_debian_mirror_comes_from_the_hosts_apt_configuration(tmp_path):
    """No host name in the script: the root is built from the mirror the user's apt uses (deb822 or one-line
    format; security and third-party repositories passed over), or refused when apt names none."""
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example.test/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example.test/debian/\nSuites: bookworm\n")
    assert _debian_mirror(tmp_path).stdout.strip() == "http://mirror.example.test/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64 signed-by=/k.gpg] https://apt.example.test/other main\n"
                                           "deb http://local.example.test/debian bookworm main\n")
    assert _debian_mirror(tmp_path).stdout.strip() == "http://local.example.test/debian"
    (tmp_path / "sources.list").write_text("")
    none = _debian_mirror(tmp_path)
    assert none.returncode != 0 and none.stdout == ""
    assert _debian_mirror(tmp_path, "http://given.example.test/debian").stdout.strip() == "http://given.example.test/debian"
    assert "deb.debian.org" not in (REPO / "scripts" / "setup-arm64.sh").read_text()
