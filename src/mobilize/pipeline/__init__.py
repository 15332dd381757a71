"""Pipeline: recipes, the one pass -> export path (``build``), the one process engine (``process``) and one call
in a child on it (``isolate``).  Orchestrators (compare, tune, sweep, the CLI) call it; it calls no orchestrator."""
