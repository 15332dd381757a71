"""What a compare run is asked to do: :class:`CompareConfig` (every field has a default) and the shape of the
progress callback.

    >>> from mobilize.compare.config import CompareConfig
    >>> cfg = CompareConfig(model="zoo:conv_bn_relu")
    >>> cfg.rounds, cfg.iterations, cfg.out_dir
    (5, 50, 'out/compare')
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from mobilize.accuracy.verify import DEFAULT_POLICY, Policy
from mobilize.bench.racing import DEFAULT_TIME_BUDGET_S


Progress = Callable[[int, int, str], None]
EVAL_TOKENS = 128
"""A causal LM's held-out window when ``--eval-len`` is not given (shorter where the model's context is)."""
"""Called with (steps done, steps in total, what is happening now)."""


@dataclasses.dataclass(frozen=True)
class CompareConfig:
    model: str = ""
    """Model reference (empty: the built-in default model)."""
    prompt_tokens: int = 32
    """A causal LM (``--task generation``): the prompt whose prefill is timed (``--prompt-len``)."""
    gen_tokens: int = 32
    """A causal LM: decode steps timed per round (``--gen-len``)."""
    eval_sequences: int = 16
    """A causal LM: held-out sequences the perplexity and agreement are measured on (the interval is over them)."""
    eval_tokens: int | None = None
    """A causal LM: tokens per held-out sequence (teacher-forced: one prefill each); ``--eval-len``.  None:
    ``EVAL_TOKENS``, or the model's context less one where that is shorter."""
    continuations: int = 4
    """A causal LM: prompts whose greedy continuation (``gen_tokens`` long) is compared token by token."""
    data: str | None = None
    """Data for accuracy and benchmark inputs (None: a default for the model, else seeded random inputs)."""
    calibration: str | None = None
    """Calibration data for int8 (None: the training split of ``data``, or ``data`` itself, noted)."""
    input_specs: tuple = ()
    out_dir: str = "out/compare"
    threads: int | None = None
    """Threads for every runtime (None: all cores)."""
    iterations: int = 50
    """Timed iterations per variant, spread over the rounds."""
    rounds: int = 5
    """Rounds every timed variant runs; then the OK ones race (:mod:`mobilize.bench.racing`)."""
    time_budget_s: float = DEFAULT_TIME_BUDGET_S
    """Seconds for the timed rounds (warm-up and the first ``rounds`` included): racing stops when the next round
    would overrun it, and the variants still within noise of the leader are a tie."""
    accuracy_samples: int = 1000
    timeout_s: float = 600.0
    """Per stage (build, load+accuracy, each timed round)."""
    trust_pickle: bool = False
    target: str = "host"
    policy: Policy = DEFAULT_POLICY
    verbose: bool = False
    """Let workers' stderr through instead of capturing it in ``<out>/logs``."""
    input_names: tuple[str, ...] = ()
    """The model's input names (filled in from its forward signature), to match .npz arrays by name."""
    bound_args: dict = dataclasses.field(default_factory=dict)
    """Non-tensor forward arguments bound by name (``--input sr=16000``)."""
    task: str | None = None
    """The model's task (``--task``); None: guessed from the float model's outputs (and said so)."""
    metric: str | None = None
    """``FILE.py:FUNCTION``: the user's own accuracy measure, judged by ``policy.max_drop_points``."""
    unit: str = "same-work"
    """What the timed rounds time and the pick is made on (:class:`mobilize.runtimes.base.Unit`): ``same-work``,
    from the reference's float input to a float answer with each file's own conversions timed, or ``file``, each
    file alone on its own element type and layout.  The other figure is kept beside it (``p50 file``)."""
    frames: dict | None = None
    """``--frames LAYOUT:WxH[:ROT]`` (:class:`mobilize.camera.loop.FrameTiming`'s JSON): every timed file also runs
    the camera frame-to-answer loop in each round, and the race and the pick are made on it; None: no frames."""
    verify_on: str | None = None
    """``arm64``: also check every file on arm64 kernels under QEMU, after the timed rounds (:mod:`mobilize.arm64`)."""
    arm64_cpu: str = "cortex-a76"
    """The QEMU CPU model for ``verify_on`` (its features decide the kernels: fp16, dotprod, i8mm)."""
    timed: bool = True
    """False: build and judge every file, no timed rounds (``optimize`` of a causal LM; ``--on`` without host)."""
    budgets: dict | None = None
    """Limits beyond accuracy (:mod:`mobilize.compare.budgets`: ``max_size_mb``, ``max_memory_mb``,
    ``max_latency_ms`` with ``latency_percentile``, ``min_tokens_per_s``): the pick is the fastest file within all."""
    baseline: dict | None = None
    """An earlier run's report.json, read and checked before any work (``--baseline``,
    :mod:`mobilize.compare.baseline`): this run's files are compared with its."""
    devices: tuple[str, ...] = ()
    """``--on DEVICE`` other than host: each file also checked and timed there, after the host's stages
    (:mod:`mobilize.compare.devices`): ``arm64``, ``ssh://...`` or a devices-file name."""

    @property
    def max_len(self) -> int:
        """A causal LM: the cache every decoder file is built for - the longest sequence any measure feeds, plus
        one."""
        return max(self.eval_tokens or EVAL_TOKENS, self.prompt_tokens + self.gen_tokens) + 1

    def decoding(self, task_why: str) -> dict:
        """A causal LM's lengths and text, as every job of its run reads them (``Job.decoding``)."""
        return {"prompt_tokens": self.prompt_tokens, "gen_tokens": self.gen_tokens,
                "eval_sequences": self.eval_sequences, "eval_tokens": self.eval_tokens or EVAL_TOKENS,
                "eval_tokens_given": self.eval_tokens is not None,
                "continuations": self.continuations, "max_len": self.max_len, "text": self.data,
                "task_given": self.task == "generation", "task_why": task_why}
