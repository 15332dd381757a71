"""Runtimes: ``Artifact`` (or eager module) → ``Session``, each inside its backend's folder (found through
``BACKENDS``)."""

from mobilize.core.backend import RUNTIMES  # noqa: F401  (the registry lives with the descriptors)

__all__ = ["RUNTIMES"]
