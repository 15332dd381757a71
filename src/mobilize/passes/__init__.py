"""Passes: ``nn.Module -> nn.Module`` transforms, one per file, file name == registry key."""

from mobilize.registry import Registry

PASSES: Registry = Registry("pass", "mobilize.passes")
