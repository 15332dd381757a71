"""Entry point: parse, dispatch; a user error is one line and exit 2, a bug in mobilize one line and exit 1.

    $ mobilize compare                        # the main job on the built-in default model
    $ mobilize bench model.pte --threads 1 --json out.json
    $ mobilize list recipes
"""

from __future__ import annotations

import sys

from mobilize.core import interrupts

TYPE_CHECKING = False  # typing, argparse and the rest are imported once the interrupt handler is in place
if TYPE_CHECKING:
    import argparse
    from typing import Sequence

SUBCOMMANDS = ("bench", "optimize", "compare", "devices", "generate", "list", "lint", "sweep", "tune", "verify")


def build_parser() -> argparse.ArgumentParser:
    import argparse
    import importlib

    from mobilize import __version__

    parser = argparse.ArgumentParser(
        prog="mobilize",
        description="Turn a trained PyTorch model into the fastest artifact that still gives the right answers, "
                    "and prove it: every format built, checked against the float model on real data, and timed "
                    "the same way.",
        epilog="Start with `mobilize compare` (the built-in default model) or `mobilize compare MODEL --data SRC`; "
               "`mobilize list` shows the zoo models, recipes, plans, runtimes, passes and exporters.")
    parser.add_argument("--version", action="version", version=f"mobilize {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"mobilize.cli.{name}").add_parser(sub)
    return parser


def _quiet_library_loggers() -> None:
    """torch and the engines' packages (``Backend.packages``: torchao, onnxscript ...) configure their own loggers
    and warn about internals users cannot act on."""
    import logging
    import os

    from mobilize.core.backend import engine_packages

    # transformers sets its own level when it is first imported (from TRANSFORMERS_VERBOSITY, else warnings), so a
    # level set here before that is undone: its tokenizer's "Token indices sequence length is longer than ..." came
    # before mobilize's own one-line refusal of a prompt longer than the file holds.  The variable reaches the
    # processes the command starts too; a user who set it keeps their choice.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for name in ("torch", "torch.utils._pytree", *engine_packages()):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    """SIGTERM (what `timeout` and CI cancellation send) is handled like Ctrl-C: the work in flight is recorded as
    interrupted, temporary files are removed, and the command says where its results are.  One handler for both
    (:mod:`mobilize.core.interrupts`), installed before anything else is imported, so an interrupt is never lost in
    a window, never raised inside an import and never cuts the start of a child process in two."""
    try:
        interrupts.install()  # one sent during start-up (the launcher blocks them) is delivered here: one line
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # before the command started (its own interrupts are handled in _dispatch)
        print(interrupts.INTERRUPTED, file=sys.stderr)
        return 130
    finally:
        if argv is None:  # the `mobilize` process itself (not a test calling main): what follows is its exit
            _reap_helpers()
            interrupts.exiting()


def _reap_helpers() -> None:
    """The fork servers and resource tracker this process started, stopped and reaped as it exits (none left a
    zombie re-parented to init): last among multiprocessing's exit finalizers, after those that release its
    semaphores (stopped before them, the tracker warned of a "leaked semaphore").  Nothing when none was started."""
    if "mobilize.pipeline.process" in sys.modules:
        from multiprocessing import util

        util.Finalize(None, sys.modules["mobilize.pipeline.process"].stop_servers, exitpriority=-101)


def _main(argv: list[str]) -> int:
    import logging

    debug = "--debug" in argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("mobilize").setLevel(logging.DEBUG if debug else logging.WARNING)
    _quiet_library_loggers()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from mobilize.core.paths import Outputs

    from mobilize.core.noise import filtered_terminal

    _private_inductor_cache()

    outputs = Outputs()
    try:
        with interrupts.on_abandon(outputs.abandon), \
                filtered_terminal(enabled=not (debug or getattr(args, "verbose", False))) as dropped:
            code = _dispatch(args, outputs, debug, parser)
    finally:
        outputs.release()  # also on an interrupt that lands after the command's own handling
    _say_where_dropped_lines_went(dropped)
    if code != 0:
        outputs.discard()  # a failed run leaves no empty folder it created behind
    return code


def _private_inductor_cache() -> None:
    """torch's inductor makes its cache folder (``$TMPDIR/torchinductor_$USER``) when transformers' modeling code is
    imported (through torchao), which every decoder command's processes do: an empty folder was left in the user's
    temp folder after each run.  Unless the user names one (``TORCHINDUCTOR_CACHE_DIR``), the run gets its own, which
    the processes it starts inherit, removed at exit (a killed run's goes with the next run's stale clean-up)."""
    import os

    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return
    import atexit
    import shutil
    import tempfile

    from mobilize.core.paths import temp_prefix

    path = tempfile.mkdtemp(prefix=temp_prefix("inductor"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    atexit.register(shutil.rmtree, path, True)


def _say_where_dropped_lines_went(dropped: Sequence[str]) -> None:
    """Lines the terminal filter kept off the screen (a runtime's log format: the model's own code may write in it
    too) are kept in a file, and the run says where: nothing written to stderr is lost without a word."""
    if not dropped:
        return
    import tempfile

    fd, path = tempfile.mkstemp(prefix="mobilize-stderr-", suffix=".log")
    with open(fd, "w") as fh:
        fh.write("\n".join(dropped) + "\n")
    print(f"note: {len(dropped)} line(s) written to stderr in a library's log format (a runtime's, or the model's "
          f"own in that form) were kept off the terminal: they are in {path}", file=sys.stderr)


def _dispatch(args: argparse.Namespace, outputs, debug: bool, parser: argparse.ArgumentParser) -> int:
    """Check the command's inputs and outputs (declared with ``set_defaults(inputs=[(dest, flag)],
    outputs=[(dest, flag, "folder"|"file")])``) before any work, lock its output folders against a second run,
    run it, and turn every error into one line and an exit code."""
    import traceback

    from mobilize.core.errors import InternalError, MobilizeError
    from mobilize.core.paths import check_input_path

    try:
        _refuse_empty_values(parser, args)
        for dest, flag in getattr(args, "inputs", ()):
            values = getattr(args, dest, None)
            for value in values if isinstance(values, list) else [values]:
                check_input_path(value, flag)
        for dest, flag, kind in getattr(args, "outputs", ()):
            value = getattr(args, dest, None)
            if value is not None:
                (outputs.folder if kind == "folder" else outputs.file)(value, flag)
                note = outputs.lock(value, flag) if kind == "folder" else ""
                if note:
                    print(f"mobilize: note: {note}", file=sys.stderr)
        return int(args.run(args) or 0)
    except InternalError as exc:
        return _internal(exc, debug)
    except MobilizeError as exc:
        if debug:
            traceback.print_exc()
            _child_traceback(exc)
        print(f"mobilize: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(interrupts.INTERRUPTED, file=sys.stderr)
        return 130
    except BrokenPipeError as exc:
        if not _stdout_reader_gone():  # another pipe (a child's): not the user's reader, so a bug as any other
            return _internal(exc, debug)
        return _stop_writing()
    except Exception as exc:  # the last resort: anything else escaping a command is a bug in mobilize
        return _internal(exc, debug)


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (``mobilize generate ... | head -c 10``): poll() reports
    an error on the write end of a pipe with no reader left."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _stop_writing() -> int:
    """The reader of stdout went away: the command ends quietly, as Unix tools do when ``head`` has what it wanted
    (exit 0: what the command had to write went as far as its reader wanted; its files are written as usual).
    stdout is pointed at /dev/null so that Python's own flush at exit raises nothing more."""
    import contextlib
    import os

    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


def _refuse_empty_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A value given as '' (or blanks) is refused: no option means anything by it, and read as "not given" (``compare
    --frames ''`` ran without frames) the command did something other than what was typed."""
    import argparse

    from mobilize.core.errors import ConfigError

    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for action in commands[args.command]._actions:
        value = getattr(args, action.dest, None)
        if value == action.default or (action.const is not None and value == action.const):
            continue
        if any(isinstance(v, str) and not v.strip() for v in (value if isinstance(value, list) else [value])):
            flag = action.option_strings[0] if action.option_strings else action.metavar or action.dest
            raise ConfigError(f"{flag} is empty", hint=f"give {flag} a value, or leave it out")


def _child_traceback(exc: BaseException) -> None:
    """An error raised in a child process (mobilize.pipeline.isolate) carries the child's traceback."""
    trace = getattr(exc, "child_traceback", None)
    if trace:
        print(f"In the child process:\n{trace}", file=sys.stderr, end="")


def _internal(exc: BaseException, debug: bool) -> int:
    """A bug in mobilize: one line that says so, exit 1; the traceback with --debug."""
    import traceback

    from mobilize.core.errors import InternalError, headline

    if debug:
        traceback.print_exc()
        _child_traceback(exc)
    what = str(exc) if isinstance(exc, InternalError) else f"{type(exc).__name__}: {headline(exc)}"
    print(f"mobilize: internal error (a bug in mobilize, not in your input): {what} — rerun with --debug for the "
          f"traceback and report it with that output", file=sys.stderr)
    return 1
