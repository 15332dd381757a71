"""Issue #48 item 13: lint's model-build limit was a fixed 300 s in the command; it is ``LintConfig.build_timeout_s``
(the one time limit on the user's code, :mod:`mobilize.core.deadline`, which --metric uses too)."""

from __future__ import annotations

import time

import pytest

from mobilize.core.errors import ConfigError, UserError
from mobilize.lint import LintConfig, lint

SLOW = '''
import time
from torch import nn


class SlowToBuild(nn.Sequential):
    def __init__(self):
        while True:  # a constructor that downloads, or loops: it catches Exception and goes on
            try:
                time.sleep(0.05)
            except Exception:
                pass
'''


def test_a_model_that_takes_too_long_to_build_is_stopped_at_the_configured_limit(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW)
    start = time.monotonic()
    with pytest.raises(UserError, match=r"building the model .*slow\.py:SlowToBuild took longer than lint's 0\.5 s "
                                        r"limit") as info:
        lint(f"{tmp_path / 'slow.py'}:SlowToBuild", LintConfig(targets=(), build_timeout_s=0.5),
             input_specs=[(1, 3, 8, 8)])
    assert time.monotonic() - start < 30 and "build_timeout_s" in info.value.hint


def test_the_limit_is_a_number_of_seconds():
    assert LintConfig(targets=()).build_timeout_s == 300.0 and LintConfig(targets=(), build_timeout_s=None)
    with pytest.raises(ConfigError, match="model-build time limit"):
        LintConfig(targets=(), build_timeout_s=-1.0)
