"""compare builds the files whose tool takes minutes at a real size after the others (issue #63 item 1): on two
cores the quick files' checks then run beside the slow builds instead of waiting behind them (at Qwen2.5-0.5B's
shape ExecuTorch's build took 450 s and LiteRT's 296 s, llama.cpp's, GenAI's and OpenVINO's 22-30 s each)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from mobilize.compare import variants
from mobilize.generation.plan import DecoderStep, generation_variants


def test_slow_builds_are_built_and_checked_after_the_quick_ones(monkeypatch):
    steps = [DecoderStep(v) for v in generation_variants(["eager-fp32", "executorch-8da4w", "litert-int4",
                                                          "llamacpp-q4_k_m", "onnx-genai-int4"])]
    assert [s.slow_build for s in steps] == [False, True, True, False, False]
    built, checked, lock = [], [], threading.Lock()

    def build(run, v):
        with lock:
            built.append(v.name)
        return v.name

    def check(run, v, future):
        if future is not None:
            future.result()
        checked.append(v.name)

    monkeypatch.setattr(variants, "_build", build)
    monkeypatch.setattr(variants, "_check", check)
    variants.check_variants(SimpleNamespace(variants=steps, save=lambda: None, decoding=None))
    quick_first = ["eager-fp32", "llamacpp-q4_k_m", "onnx-genai-int4", "executorch-8da4w", "litert-int4"]
    assert built == quick_first and checked == quick_first
