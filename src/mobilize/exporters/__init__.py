"""Exporters: module → Artifact, one per format, file name == registry key."""

from mobilize.registry import Registry

EXPORTERS: Registry = Registry("exporter", "mobilize.exporters")
