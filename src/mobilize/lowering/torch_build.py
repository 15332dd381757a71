"""Facts about the installed torch build that several lowerings need."""

from __future__ import annotations


def xnnpack_enabled() -> bool:
    """Whether this torch build has XNNPACK (``optimize_for_mobile`` fails without it)."""
    import torch.backends.xnnpack

    return bool(torch.backends.xnnpack.enabled)
