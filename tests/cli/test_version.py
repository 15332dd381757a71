"""`mobilize --version` prints the version pyproject.toml builds, and CHANGELOG.md has an entry for it:
the version is written in two places (pyproject.toml, mobilize.__version__) and must move in both."""

import tomllib
from pathlib import Path

import pytest

import mobilize
from mobilize.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_built_one_and_has_a_changelog_entry(capsys):
    built = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"mobilize {built}" == f"mobilize {mobilize.__version__}"
    assert f"## {built}" in (ROOT / "CHANGELOG.md").read_text()
