"""Built-in models, one file each; the file name is the ``zoo:NAME`` key."""

from mobilize.core.registry import Registry

ZOO: Registry = Registry("zoo model", "mobilize.zoo")

DEFAULT_MODEL = "digits_mobilenet_v2"

DECODERS = frozenset({"tiny_lm"})
"""The entries whose task is ``generation`` (each declares it in its registration too; tests/zoo checks they agree):
known here so that the CLI's own process decides a zoo model's task without importing its module, which imports
torch (2-3 s) in a process that has no other use for it - the model is built in a worker."""
