"""Exporters: module → Artifact, one per format, each inside its backend's folder (found through ``BACKENDS``)."""

from mobilize.core.backend import EXPORTERS  # noqa: F401  (the registry lives with the descriptors)

__all__ = ["EXPORTERS"]
