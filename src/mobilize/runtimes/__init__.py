"""Runtimes: ``Artifact`` (or eager module) → ``Session``, one file per runtime."""

from mobilize.registry import Registry

RUNTIMES: Registry = Registry("runtime", "mobilize.runtimes")
