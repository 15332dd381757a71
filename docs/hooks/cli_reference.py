"""The CLI reference page, written from the argparse parsers at build time, so it cannot drift from the tool.

mkdocs.yml names this file under ``hooks:``; :func:`on_files` adds ``reference/cli.md`` to the site as a generated
page (no file is written to docs/).  tests/test_docs.py renders the same page from the parser and checks every
flag of every command is in it.

    >>> from mobilize.cli.main import build_parser
    >>> page = render(build_parser())
    >>> "## mobilize compare" in page and "`--max-drop POINTS`" in page
    True
"""

from __future__ import annotations

import argparse

PAGE = "reference/cli.md"


def _commands(parser: argparse.ArgumentParser, prog: str = "mobilize", what: str = ""):
    """(prog, parser, what it does) for the parser and every subcommand under it, depth first, in its order."""
    yield prog, parser, parser.description or what
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{prog} {name}", helps.get(name, ""))


def _flag(action: argparse.Action) -> str:
    """How the option is written: every spelling, with its metavar (``--iter N``, ``-o DIR, --out DIR``)."""
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`".replace("|", "\\|")
    takes = action.nargs != 0
    metavar = ""
    if takes:
        if action.metavar is not None:
            metavar = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
        elif action.choices is not None:
            metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
        else:
            metavar = action.dest.upper()
    written = ", ".join(f"`{s} {metavar}`" if metavar else f"`{s}`" for s in action.option_strings)
    return written.replace("|", "\\|")


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = parser._get_formatter()._expand_help(action) if action.help else ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction) and action.option_strings:
        listed = ", ".join(f"`{c}`" for c in action.choices)
        text = f"{text} (one of {listed})" if listed not in text else text
    return _prose(text).replace("|", "\\|")


def _prose(text: str) -> str:
    """Help text as one Markdown line; brackets escaped (``[--variant NAME ...]`` is not a link)."""
    return " ".join(text.split()).replace("[", "\\[").replace("]", "\\]")


def render(parser: argparse.ArgumentParser) -> str:
    """The whole page: for each command its usage, what it does, and a table of its arguments."""
    lines = ["# CLI reference", "",
             "Generated from `mobilize.cli.main.build_parser()` when the site is built (`docs/hooks/cli_reference.py`):",
             "every command, every flag, with the help `mobilize COMMAND --help` prints.", ""]
    for prog, sub, what in _commands(parser):
        lines += [f"## {prog}", ""]
        if what:
            lines += [_prose(what), ""]
        usage = " ".join(sub.format_usage().removeprefix("usage: ").split())
        lines += ["```", usage, "```", "", "| argument | what it does |", "|---|---|"]
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    lines.append(f"| [`{choice.dest}`](#{(prog + ' ' + choice.dest).replace(' ', '-')}) | "
                                 f"{_prose(choice.help or '')} |")
                continue
            lines.append(f"| {_flag(action)} | {_help(sub, action)} |")
        if sub.epilog:
            lines += ["", _prose(sub.epilog)]
        lines.append("")
    return "\n".join(lines)


def on_files(files, config):
    """mkdocs hook: add the generated page to the site."""
    from mkdocs.structure.files import File

    from mobilize.cli.main import build_parser

    files.append(File.generated(config, PAGE, content=render(build_parser())))
    return files
