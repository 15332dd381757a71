"""Eager PyTorch: the reference.  Runs an ``nn.Module`` or an ExportedProgram ``.pt2`` file.
"""

from __future__ import annotations

import contextlib
import logging

from mobilize.core.errors import UnsupportedModelError, headline, translate_errors
from mobilize.runtimes.torch_session import TorchSession
from mobilize.core.inputs import InputSpec, input_type_name


class EagerSession(TorchSession):
    name = "eager"
    formats = ("eager", "exported_program")

    def _load(self) -> None:
        if self.target.format == "exported_program":
            import torch

            logged: list[BaseException] = []
            # torch logs the real reason with its whole traceback, then raises "see the warnings above"
            with translate_errors(UnsupportedModelError, f"{self.target.path} is not a valid ExportedProgram (.pt2)",
                                  message=lambda exc: f"{self.target.path} is not a valid ExportedProgram (.pt2): "
                                                      f"{headline(logged[0] if logged else exc)}"), \
                    _logged_errors("torch.export", logged):
                program = torch.export.load(str(self.target.path))
            self.module = program.module()
            self._specs = _placeholder_specs(program)
            self.notes.append("ExportedProgram run eagerly via ExportedProgram.module()")
        else:
            self.module = self.target.module.eval()

    def declared_input_specs(self) -> list[InputSpec] | None:
        return getattr(self, "_specs", None)


@contextlib.contextmanager
def _logged_errors(name: str, errors: list[BaseException]):
    """Keep logger ``name``'s records off the terminal; collect the exceptions they carry."""

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.exc_info and record.exc_info[1] is not None:
                errors.append(record.exc_info[1])

    logger = logging.getLogger(name)
    saved = logger.handlers, logger.propagate, logger.level  # torch gives its loggers their own stderr handler
    logger.handlers, logger.propagate, logger.level = [Collect()], False, logging.WARNING
    try:
        yield
    finally:
        logger.handlers, logger.propagate, logger.level = saved


def _placeholder_specs(program) -> list[InputSpec]:
    """Input shapes recorded in an ExportedProgram (user inputs only, not weights)."""
    user_inputs = set(program.graph_signature.user_inputs)
    specs = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs and hasattr(node.meta.get("val"), "shape"):
            val = node.meta["val"]
            shape = tuple(d if isinstance(d, int) else -1 for d in val.shape)
            dtype = input_type_name(str(val.dtype))
            specs.append(InputSpec(shape, dtype))
    return specs
