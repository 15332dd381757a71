"""mobilize.native.cross without an arm64 root: the refusals and the ELF guard (the builds and runs themselves
are in tests/arm64/test_arm64_native.py, marked arm64)."""

from __future__ import annotations

import pytest


def test_aarch64_build_without_the_cross_compiler_is_a_one_line_refusal(monkeypatch, tmp_path):
    import sys

    from mobilize.core.errors import BackendUnavailableError
    from mobilize.native.cross import cross_toolchain, elf_machine

    monkeypatch.setenv("MOBILIZE_AARCH64_CXX", str(tmp_path / "no-such-g++"))
    with pytest.raises(BackendUnavailableError) as info:
        cross_toolchain()
    assert "aarch64-linux-gnu-g++" in str(info.value) and "setup-arm64.sh" in str(info.value.hint)
    assert "\n" not in str(info.value)
    assert elf_machine(sys.executable) == 62  # this host's python is x86-64, the guard's other side
