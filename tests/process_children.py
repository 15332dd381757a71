"""Targets for tests/test_process.py's children (importable as ``tests.process_children`` from a spawned or
fork-served child)."""

from __future__ import annotations

import os
import signal
import sys
import time


def describe(conn) -> None:
    """What the child is: whether torch came with it, SIGINT blocked, its parent and grandparent."""
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with open(f"/proc/{os.getppid()}/stat") as fh:
        grandparent = int(fh.read().rsplit(")", 1)[1].split()[1])
    conn.send({"torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules,
               "sigint_blocked": blocked, "pid": os.getpid(),
               "parent": os.getppid(), "grandparent": grandparent})


def sleep_forever(conn) -> None:
    conn.send(os.getpid())
    while True:
        time.sleep(1)


def crash_in_a_decoder_step(reference, threads, prompt_tokens, gen_tokens, iterations, warmup, progress=None) -> None:
    """A decoder bench child (``bench_generation``'s signature) whose engine dies in native code at its first
    prefill, after announcing the step as the real one does."""
    progress(1, 3, f"llamacpp running its first prefill and decode steps on {reference}")
    os.kill(os.getpid(), signal.SIGSEGV)
