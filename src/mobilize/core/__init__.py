"""Core: what every other part stands on and nothing above it changes - errors, the registry and the engine
descriptor (``backend``), configs, input specs, artifacts, context, outcomes, targets, paths, checks, runtime
options, completeness checks of files, and the third-party noise filter.  Core imports only core."""
