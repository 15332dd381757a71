"""Runtime options: the thread count every runtime takes, and each runtime's own options, checked against the
``Options`` dataclass its Session declares (ONNX Runtime: graph optimization level, I/O binding; ExecuTorch:
output reuse).  An option no runtime of the run honours is a user error, not a silent no-op.

    >>> RuntimeOptions.from_dict({"threads": 2, "io_binding": True}).extra
    {'io_binding': True}
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator, Mapping

from mobilize.core.errors import ConfigError

OPTION_FLAGS = {"io_binding": "--io-binding"}
"""The CLI flag that sets an option, for error messages."""


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    threads: int | None = None
    """Intra-op threads (None: the runtime's default, usually one per core)."""
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Options of one runtime (``io_binding``, ``graph_optimization_level`` ...), checked when it loads."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "RuntimeOptions":
        data = dict(data or {})
        threads = data.pop("threads", None)
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)):
            raise ConfigError(f"runtime option threads must be a whole number, got {threads!r}")
        return cls(threads, data)

    def to_dict(self) -> dict[str, Any]:
        return {**({"threads": self.threads} if self.threads is not None else {}), **dict(self.extra)}

    def with_threads(self, threads: int | None) -> "RuntimeOptions":
        return dataclasses.replace(self, threads=threads)


def check_options(runtime: str, options: RuntimeOptions) -> Any:
    """The runtime's own options built from ``options.extra`` (threads checked too); an option this runtime does
    not have is a one-line ConfigError naming the runtimes that have it."""
    from mobilize.core.checks import check_threads
    from mobilize.core.config import build_config
    from mobilize.core.backend import RUNTIMES

    check_threads(options.threads, "threads")
    own = RUNTIMES.get(runtime).Options
    fields = {f.name for f in dataclasses.fields(own)}
    for name in options.extra:
        if name not in fields:
            flag = OPTION_FLAGS.get(name, f"runtime option '{name}'")
            having = [r for r in RUNTIMES.names() if name in {f.name for f in dataclasses.fields(RUNTIMES.get(r).Options)}]
            if not having:
                raise ConfigError(f"unknown {flag}", hint=f"runtime '{runtime}' options: {', '.join(fields) or 'none'}")
            raise ConfigError(f"{flag} is for {', '.join(having)} only, but this runs on runtime '{runtime}'",
                              hint=f"drop {flag}, or use an artifact that {having[0]} runs")
    return build_config(own, dict(options.extra), f"runtime {runtime}")


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One torch intra-op thread for untimed work (checks, accuracy runs, lint's many tiny ops: faster and steadier
    than a pool on a busy machine), the caller's count restored afterwards.  Timed work sets its own threads."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
