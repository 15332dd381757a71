"""The ``mobilize`` command: one module per subcommand."""
