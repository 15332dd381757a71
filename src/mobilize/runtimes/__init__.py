"""Runtimes: ``Artifact`` (or eager module) → ``Session``, each inside its backend's folder (found through
``BACKENDS``)."""

from mobilize.registry import Registry


def _index() -> dict[str, str]:
    from mobilize.backends import entries

    return {key: f"mobilize.backends.{b.name}.{entry}" for key, (b, entry) in entries("runtimes").items()}


RUNTIMES: Registry = Registry("runtime", index=_index)
