"""What a generation compare measures and how much (``mobilize compare MODEL --task generation``).

    >>> cfg = GenerationConfig(model="zoo:tiny_lm", prompt_tokens=8, gen_tokens=4, eval_tokens=16)
    >>> cfg.max_len
    17
"""

from __future__ import annotations

import dataclasses

from mobilize.accuracy.verify import DEFAULT_POLICY, Policy
from mobilize.bench.racing import DEFAULT_TIME_BUDGET_S


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    model: str = "zoo:tiny_lm"
    out_dir: str = "out/compare"
    variants: tuple[str, ...] = ()
    """Decoder variants to run (empty: every engine's, the ``generation`` plan)."""
    threads: int | None = None
    """Threads for every runtime (None: all cores)."""
    prompt_tokens: int = 32
    """P: the prompt whose prefill is timed (time to first token)."""
    gen_tokens: int = 32
    """G: decode steps timed per round, fed the same token ids in every runtime."""
    eval_sequences: int = 16
    """Held-out sequences the perplexity and agreement are measured on (the interval is over them)."""
    eval_tokens: int = 128
    """Tokens per held-out sequence (teacher-forced: one prefill each)."""
    continuations: int = 4
    """Prompts whose greedy continuation (``gen_tokens`` long) is compared token by token."""
    rounds: int = 5
    time_budget_s: float = DEFAULT_TIME_BUDGET_S
    timeout_s: float = 600.0
    """Per stage (a build, a check, the timed rounds)."""
    policy: Policy = DEFAULT_POLICY
    timed: bool = True
    """False for ``optimize``: build and judge the files, no timed rounds."""

    @property
    def max_len(self) -> int:
        """The cache every file is built for: the longest sequence any measure feeds, plus one."""
        return max(self.eval_tokens, self.prompt_tokens + self.gen_tokens) + 1
