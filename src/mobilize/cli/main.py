"""Entry point: parse, dispatch, and turn user errors into one line and exit code 2.

    $ mobilize bench zoo:conv_bn_relu --iter 50
    $ mobilize bench model.pte --threads 1 --json out.json
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from typing import Sequence

from mobilize.errors import MobilizeError

SUBCOMMANDS = ("bench", "optimize", "compare")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="mobilize", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"mobilize.cli.{name}").add_parser(sub)
    return parser


def _quiet_library_loggers() -> None:
    """torch and torchao configure their own loggers and warn about internals users cannot act on."""
    for name in ("torch", "torchao", "executorch", "onnxscript", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("mobilize").setLevel(logging.DEBUG if debug else logging.WARNING)
    _quiet_library_loggers()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except MobilizeError as exc:
        if debug:
            traceback.print_exc()
        print(f"mobilize: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mobilize: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"mobilize: internal error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 1
