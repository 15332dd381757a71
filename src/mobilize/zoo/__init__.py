"""Built-in models, one file each; the file name is the ``zoo:NAME`` key."""

from mobilize.core.registry import Registry

ZOO: Registry = Registry("zoo model", "mobilize.zoo")

DEFAULT_MODEL = "digits_mobilenet_v2"
