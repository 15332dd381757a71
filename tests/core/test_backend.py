"""The engine descriptor: a runtime's name and formats are its descriptor's, filled in or checked once when the
registry loads it; the lookups answer from the descriptors."""

from __future__ import annotations

import pytest

from mobilize.core.backend import Backend, _adopt_runtime, engine_packages, host_only, profiled_every_file
from mobilize.core.errors import InternalError
from mobilize.runtimes.base import Session


def _descriptor(monkeypatch, **formats: str) -> None:
    """Make ``backend_for_runtime`` answer a planted descriptor owning ``formats`` (format -> runtime)."""
    planted = Backend(name="planted", formats=formats, runtimes={r: "runtime:X" for r in formats.values()})
    monkeypatch.setattr("mobilize.core.backend.backend_for_runtime", lambda name: planted)


def test_a_runtime_without_name_or_formats_takes_its_descriptors(monkeypatch):
    _descriptor(monkeypatch, plantfile="planted", other="elsewhere")

    class Bare(Session):
        pass

    assert _adopt_runtime("planted", Bare) is Bare
    assert Bare.name == "planted" and Bare.formats == ("plantfile",)


def test_a_runtime_that_says_otherwise_is_one_line(monkeypatch):
    _descriptor(monkeypatch, plantfile="planted")

    class Misnamed(Session):
        name = "planted2"

    with pytest.raises(InternalError, match="runtime 'planted' of backend 'planted' names itself 'planted2'"):
        _adopt_runtime("planted", Misnamed)

    class Narrow(Session):
        formats = ("onnx",)

    with pytest.raises(InternalError, match=r"runs \['onnx'\], not the format\(s\) \['plantfile'\]"):
        _adopt_runtime("planted", Narrow)


def test_the_lookups_answer_from_the_descriptors():
    assert profiled_every_file("executorch") and not profiled_every_file("onnx")
    assert host_only("nnapi") and host_only("onnx") is None
    assert {"executorch", "onnxruntime", "torchao"} <= set(engine_packages()) and "torch" not in engine_packages()
