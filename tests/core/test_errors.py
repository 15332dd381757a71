"""errors.translate_errors / third_party_failure: the one place a failure is judged bug (exit 1) or user error."""

from __future__ import annotations

import json
import os

import pytest

from mobilize.core.errors import (ConfigError, ExportError, InternalError, UnsupportedModelError, is_bug,
                             third_party_failure, translate_errors)


def test_a_third_party_failure_becomes_one_user_error_with_its_first_line():
    with pytest.raises(UnsupportedModelError) as info:
        with translate_errors(UnsupportedModelError, "reading x.json", hint="write it with json.dump"):
            json.loads("{not json\n}")
    assert str(info.value) == "reading x.json: Expecting property name enclosed in double quotes: line 1 column 2 " \
                              "(char 1) (write it with json.dump)"
    assert isinstance(info.value.__cause__, json.JSONDecodeError)


def test_a_programming_error_raised_in_a_library_is_about_the_input():
    with pytest.raises(ExportError, match="^\\[quantize\\] step: KeyError") as info:
        with translate_errors(ExportError, "step", stage="quantize", message=lambda exc: f"step: {type(exc).__name__}"):
            os.environ["MOBILIZE_TEST_NO_SUCH_VARIABLE"]  # KeyError raised inside os.py
    assert not isinstance(info.value, InternalError)


def test_a_programming_error_raised_in_our_own_code_is_a_bug():
    """``ours`` names extra files (a plugin's source) whose programming errors are bugs; here, this file."""
    with pytest.raises(InternalError, match="^exporter 'x': KeyError: 'missing'$"):
        with translate_errors(ExportError, "exporter 'x'", ours=(__file__,)):
            {}["missing"]
    with pytest.raises(InternalError):
        with third_party_failure("probe", __file__):
            None.attribute  # noqa: B018


def test_our_own_errors_and_interrupts_pass_unchanged():
    mine = ConfigError("bad option")
    with pytest.raises(ConfigError) as info:
        with translate_errors(UnsupportedModelError, "anything"):
            raise mine
    assert info.value is mine
    for stop in (KeyboardInterrupt(), SystemExit(3)):
        with pytest.raises(type(stop)):
            with third_party_failure("anything"):
                raise stop


def test_third_party_failure_records_instead_of_raising():
    with third_party_failure("probe") as failed:
        pass
    assert not failed and failed.reason == ""
    with third_party_failure("probe") as failed:
        raise RuntimeError("Unsupported property: X\nat some.cpp:12")
    assert failed and failed.reason == "Unsupported property: X" and isinstance(failed.error, RuntimeError)


def test_is_bug_is_the_one_decision():
    assert is_bug(InternalError("x")) and not is_bug(ConfigError("x"))
    try:
        {}["k"]
    except KeyError as exc:
        assert is_bug(exc, __file__) and not is_bug(exc)
