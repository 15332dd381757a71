"""Issue #66 item 7: a failed or interrupted run leaves no empty folder it made in an output folder that existed
before it (``optimize zoo:tiny_lm --recipe executorch-fp32`` stopped by SIGTERM left ``artifacts/executorch-fp32/``),
and a user's own folders, empty or not, stay."""

from __future__ import annotations

import time

from mobilize.core.paths import Outputs


def test_a_failed_run_removes_the_empty_folders_it_made_and_keeps_the_users(tmp_path):
    out = tmp_path / "out"
    (out / "mine").mkdir(parents=True)  # the user's own empty folder, made before the run
    (out / "logs").mkdir()
    (out / "logs" / "earlier.log").write_text("kept\n")
    time.sleep(0.2)  # file times come from a coarse clock: the run starts well after these were made
    outputs = Outputs()
    outputs.folder(out)
    outputs.lock(out)
    (out / "artifacts" / "executorch-fp32").mkdir(parents=True)  # what the interrupted build made
    (out / "artifacts" / "onnx-fp32").mkdir()
    (out / "artifacts" / "onnx-fp32" / "model.onnx").write_bytes(b"x")  # a file with content keeps its folder
    outputs.release()
    removed = outputs.discard()
    assert removed == [out / "artifacts" / "executorch-fp32"], removed
    assert (out / "artifacts" / "onnx-fp32" / "model.onnx").is_file()
    assert (out / "mine").is_dir() and (out / "logs" / "earlier.log").is_file()


def test_a_run_refused_a_folder_in_use_tidies_nothing_there(tmp_path):
    """The second run on a folder the first one holds is refused and must not touch what the first is making."""
    import pytest

    from mobilize.core.errors import ConfigError

    out = tmp_path / "out"
    first = Outputs()
    first.folder(out)
    first.lock(out)
    second = Outputs()
    second.folder(out)
    (out / "logs").mkdir()  # the first run's, made after the second started
    with pytest.raises(ConfigError, match="in use"):
        second.lock(out)
    assert second.discard() == [] and (out / "logs").is_dir()
    first.release()
