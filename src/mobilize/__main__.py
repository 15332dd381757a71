"""``python -m mobilize``: the CLI.  An interrupt in the milliseconds before :func:`~mobilize.cli.main.main` installs
its handler (while this import runs) ends the run as one after it does: one line, exit 130, no traceback."""

try:
    from mobilize.cli.main import main
except KeyboardInterrupt:
    import sys

    sys.stderr.write("mobilize: interrupted\n")  # mobilize.core.interrupts.INTERRUPTED (that import may be cut)
    raise SystemExit(130) from None

raise SystemExit(main())
