"""Passes: ``nn.Module -> nn.Module`` transforms, one per file, file name == registry key."""

from mobilize.core.registry import Registry

PASSES: Registry = Registry("pass", "mobilize.passes", shared=("bn_fold",))
"""Every module of the package is a pass named after it, but for the shared Conv-BN fold analysis (fuse and lint
both read it)."""
