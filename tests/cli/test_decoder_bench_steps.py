"""Issue #62 item 1 / #66 item 8: a decoder bench whose engine crashes in native code names the engine and the
step, and says the crash is no verdict on the file (one llama.cpp build crashed on every valid quantized GGUF mobilize
built, and the message asked whether mobilize had built it)."""

from __future__ import annotations

import pytest

from mobilize.cli.bench import CRASH_HINT
from mobilize.core.errors import UserError
from mobilize.pipeline.isolate import run_isolated
from tests.process_children import crash_in_a_decoder_step


def test_a_native_crash_names_the_engine_and_its_step_not_the_file():
    with pytest.raises(UserError) as caught:
        run_isolated(crash_in_a_decoder_step, "model-Q4_0.gguf", 1, 8, 8, 1, 0, what="decoder bench",
                     crash_hint=CRASH_HINT)
    text = f"{caught.value} {getattr(caught.value, 'hint', '')}"
    assert "killed by SIGSEGV" in text, text
    assert "llamacpp running its first prefill and decode steps on model-Q4_0.gguf" in text, text
    assert "says nothing against the file" in text and "mobilize built" not in text, text


def test_the_bench_announces_each_step_with_its_engine():
    from mobilize.cli._bench_generation import bench_generation

    steps = []
    report = bench_generation("zoo:tiny_lm", 1, 4, 4, 1, 0, progress=lambda done, total, text: steps.append(text))
    assert report["decode_us_per_token_p50"] > 0
    assert [s.split(" ", 1)[0] for s in steps] == ["eager"] * 3, steps
    assert [s.split(" ", 2)[1] for s in steps] == ["loading", "running", "timing"], steps
