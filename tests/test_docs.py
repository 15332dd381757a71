"""The documentation: the CLI reference lists every flag of every command (rendered here from the parser, as the
site's build does), the README is short with the two set-up commands first and links only to files that exist, and
two built pages render in a real browser (Debian's chromium, headless) when it is installed."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mobilize.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
TWO_COMMANDS = [
    "bash scripts/setup.sh && .venv/bin/mobilize compare          # the main job: every variant of the default model, "
    "side by side",
    "bash scripts/setup.sh && bash scripts/setup-llamacpp.sh && .venv/bin/python -m pytest -q -n 2 --dist worksteal"
    "   # the tests (what .ci/run runs)",
]


def cli_reference():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def commands(parser: argparse.ArgumentParser, prog: str = "mobilize"):
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, f"{prog} {name}")


def test_the_cli_reference_lists_every_flag_of_every_command():
    parser = build_parser()
    page = cli_reference().render(parser)
    sections = dict(re.findall(r"^## (mobilize[^\n]*)\n(.*?)(?=^## |\Z)", page, re.S | re.M))
    missing = []
    found = list(commands(parser))
    assert len(found) >= 9, [p for p, _ in found]
    for prog, sub in found:
        section = sections.get(prog)
        if section is None:
            missing.append(f"{prog}: no section")
            continue
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                names = list(action.choices)
            else:
                names = action.option_strings or [action.metavar or action.dest]
            missing += [f"{prog} {name}" for name in names if f"`{name}" not in section]
            if action.help and action.help != argparse.SUPPRESS and not isinstance(action, argparse._SubParsersAction):
                first = " ".join(action.help.split())[:30].replace("[", "\\[").replace("]", "\\]").replace("|", "\\|")
                if "%(" not in first and first not in section:
                    missing.append(f"{prog} {names[0]}: help {first!r}")
    assert not missing, missing


def test_the_hook_docstring_example_runs():
    import doctest

    assert doctest.testmod(cli_reference()).failed == 0


def test_the_site_builds_the_cli_reference_from_the_hook():
    config = (ROOT / "mkdocs.yml").read_text()
    assert "docs/hooks/cli_reference.py" in config and "reference/cli.md" in config
    assert not (ROOT / "docs" / "reference" / "cli.md").exists(), "the CLI reference is generated, never checked in"


def test_the_readme_is_short_with_the_two_commands_first_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    first_block = re.search(r"```\w*\n(.*?)```", text, re.S).group(1).splitlines()
    assert first_block == TWO_COMMANDS
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links and all((ROOT / link).exists() for link in links if "://" not in link), links
    for page in (ROOT / "docs").rglob("*.md"):  # every page's relative links resolve too (GitHub renders them)
        for link in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text()):
            if link != "reference/cli.md" and not link.endswith("/cli.md"):
                assert (page.parent / link).resolve().exists(), f"{page}: {link}"


@pytest.mark.e2e
def test_two_built_pages_render_in_a_real_browser(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed (scripts/setup.sh installs it as root): pages not rendered")
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists():
        pytest.skip("mkdocs is not installed (the docs extra: pip install -e '.[docs]')")
    site = tmp_path / "site"
    built = subprocess.run([str(mkdocs), "build", "--strict", "-q", "-d", str(site)], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    from PIL import Image

    for page, heading, needle in [("getting-started", "Getting started", "scripts/setup.sh"),
                                  ("reference/cli", "CLI reference", "--max-drop")]:
        url = (site / page / "index.html").as_uri()
        shot = tmp_path / f"{page.replace('/', '-')}.png"
        base = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"]
        dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
        subprocess.run(base + [f"--screenshot={shot}", url], capture_output=True, timeout=120)
        assert f">{heading}" in dom and needle in dom and 'class="md-nav' in dom, (page, dom[:500])
        image = Image.open(shot).convert("RGB")
        assert image.size == (1280, 900)
        colours = image.getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 50, f"{page} rendered as {len(colours)} colours: a blank page"


def test_the_api_pages_examples_run():
    """The Python API page's example is code a user copies: every ```python block of it runs here."""
    text = (ROOT / "docs" / "reference" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "the API page has no example"
    for block in blocks:
        exec(compile(block, "docs/reference/api.md", "exec"), {})
