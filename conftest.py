"""Root conftest: the ``>>>`` examples in src/mobilize run as doctests (``--doctest-modules``), each in its own
temporary folder, so an example that writes ``out/...`` leaves nothing in the checkout."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _doctest_in_tmp(request, tmp_path, monkeypatch):
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.chdir(tmp_path)
    yield
