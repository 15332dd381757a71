"""A user --metric is the user's own code: it is said once when loaded that it runs with their permissions, and it
runs under its own time limit (a sleeping metric used to run for the stage's 600 s)."""

from __future__ import annotations

import argparse
import time

import pytest

from mobilize.accuracy.tasks import call_metric
from mobilize.cli.inputs import task_from_args
from mobilize.core.errors import UserError


def test_a_hanging_metric_is_stopped_at_its_own_limit(monkeypatch):
    monkeypatch.setenv("MOBILIZE_METRIC_TIMEOUT_S", "0.5")

    def sleepy(outputs, reference_outputs, labels):
        try:
            time.sleep(30)
        except Exception:  # the user's own broad handler must not swallow the limit
            return 1.0
        return 1.0

    start = time.monotonic()
    with pytest.raises(UserError, match=r"--metric m.py:sleepy ran past its 0.5 s limit"):
        call_metric(sleepy, "m.py:sleepy", [], [], None)
    assert time.monotonic() - start < 5
    assert call_metric(lambda o, r, y: 0.5, "m.py:ok", [], [], None) == 0.5  # the alarm is disarmed after


def test_loading_a_metric_says_it_runs_as_the_users_code(tmp_path, capsys):
    (tmp_path / "m.py").write_text("def f(outputs, reference_outputs, labels):\n    return 1.0\n")
    args = argparse.Namespace(task=None, metric=f"{tmp_path}/m.py:f")
    assert task_from_args(args) == (None, f"{tmp_path}/m.py:f")
    err = capsys.readouterr().err
    assert "is your own code: it runs with your permissions" in err and "120 s limit" in err
    assert len(err.strip().splitlines()) == 1
