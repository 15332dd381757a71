"""compare --on's devices checked before any work (issue #64): an unknown name, a bad address and an arm64 root
that is not there are one line and exit 2, and nothing is written."""

from __future__ import annotations

import pytest

from tests.conftest import assert_one_line_error


@pytest.mark.parametrize("on, fragment", [("pi5", "unknown device 'pi5'"),
                                          ("ssh://host:99999", "the port is not a number from 1 to 65535"),
                                          ("ssh:///nohost", "is not a device address"),
                                          ("arm64", "cannot run files on arm64: no arm64 root at")])
def test_a_device_that_cannot_be_used_is_one_line_before_any_work(on, fragment, run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("MOBILIZE_DEVICES", str(tmp_path / "devices.json"))
    monkeypatch.setenv("MOBILIZE_ARM64_ROOT", str(tmp_path / "no-root"))
    code, _, err = run_cli("compare", "zoo:conv_bn_relu", "--on", on, "-o", tmp_path / "out")
    assert_one_line_error(code, err, fragment)
    assert not (tmp_path / "out").exists()
