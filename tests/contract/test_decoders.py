"""Every decoder variant an engine declares (``Backend.decoders``), held to the same contract on one tiny random
Llama - a new engine's variant is tested here the moment it registers:

- every file: prefill gives float32 logits for every position, cached decode steps one position each, a second
  prefill starts afresh (a longer sequence between leaves nothing behind), the whole cache is usable, and one
  token more than the cache is refused in one line;
- a float file (Promise.FLOAT): the model's own logits to rounding, each cached step equal to the full forward
  at that position, the same greedy tokens;
- a quantized file: its cached steps agree with its own full prefill (the cache is right whatever the weights),
  and it is near the float model but not equal to it (it really is quantized);
- a variant that offers int4 groups: ``NAME@gN`` builds a different file that runs.

Each engine's own tests (tests/backends/<engine>/) check what only that engine has (its tool's quantized model,
its file layout, its thread pool)."""

from __future__ import annotations

import numpy as np
import pytest

from mobilize.core.decoder import Promise
from mobilize.core.errors import ConfigError
from mobilize.generation.plan import generation_variants
from tests.decoder_files import MAX_LEN, OTHER, PROMPT, STEPS, VOCAB, close, eager, greedy

VARIANTS = [v.name for v in generation_variants()]
CONTRACT_VARIANTS = [pytest.param(name, marks=pytest.mark.slow) if name.startswith("optimum-") else name
                     for name in VARIANTS]
"""The peers' files (their own CLIs in their venvs, ~1 min a build where scripts/setup-peers.sh ran) in the slow
suite: tests/generation/test_peers.py runs the same runner on planted CLIs by default."""
QUANTIZED_CACHE_TOLERANCE = 0.05
"""A quantized file's cached steps against its own full prefill, relative to the largest logit: a dynamic
activation scale may differ between one token and a sequence (8da4w, LiteRT's dynamic int8)."""


def test_every_engine_declares_decoders():
    assert {v.engine for v in generation_variants()} >= {"eager", "executorch", "onnxruntime", "openvino", "litert"}


def test_a_variant_is_registered_under_its_own_name_and_engine(monkeypatch):
    """Issue #63 item 7: the registry's key, the variant's name and its engine agree for every decoder (a name the
    listing showed could be refused by --variant), and a backend that registers one under another key is a bug
    named at once, not a variant that cannot be asked for."""
    import dataclasses

    from mobilize.backends import BACKENDS
    from mobilize.core.errors import InternalError

    for v in generation_variants():
        assert generation_variants([v.name])[0] == v
    onnx = BACKENDS.get("onnxruntime")
    wrong = dataclasses.replace(onnx, decoders={**onnx.decoders, "onnx-int5": onnx.decoders["onnx-int4"]})
    monkeypatch.setattr(BACKENDS, "get", lambda name, _get=BACKENDS.get: wrong if name == "onnxruntime" else _get(name))
    with pytest.raises(InternalError, match="registers decoder 'onnx-int5' .* named 'onnx-int4'"):
        generation_variants()


def test_a_float_sibling_is_the_same_engines_float_file():
    """Issue #63 item 5: the float file a quantized variant is judged beside is registered, float and of the same
    engine; every engine whose tool makes a float and a quantized file declares the pair."""
    from mobilize.core.decoder import Promise

    variants = {v.name: v for v in generation_variants()}
    paired = {v.name for v in variants.values() if v.float_sibling}
    for name in paired:
        v, sibling = variants[name], variants[variants[name].float_sibling]
        assert v.promise == Promise.QUANTIZED and sibling.promise == Promise.FLOAT and sibling.engine == v.engine
    assert {"onnx-int4", "onnx-genai-int4", "executorch-8da4w", "openvino-int4", "litert-int4", "eager-int8wo"} <= paired


@pytest.mark.parametrize("name", CONTRACT_VARIANTS)
def test_decoder_contract(name, decoder_file, tiny_llama):
    from mobilize.lowering.decoder import load_hf_decoder

    variant, path = decoder_file(name)
    model = load_hf_decoder(tiny_llama)
    fp32 = eager(model, PROMPT)
    session = variant.load(path, 1, MAX_LEN)
    try:
        assert session.max_len == MAX_LEN
        first, steps, tokens = greedy(session, PROMPT, STEPS)
        assert first.shape == (len(PROMPT), VOCAB) and first.dtype == np.float32 and np.isfinite(first).all()
        assert all(s.shape == (VOCAB,) and s.dtype == np.float32 and np.isfinite(s).all() for s in steps)
        if variant.promise == Promise.FLOAT:
            assert close(first, fp32)
            full = eager(model, PROMPT + tokens[:-1])
            for i, logits in enumerate(steps):  # each cached step against the full forward at its position
                assert close(logits, full[len(PROMPT) + i]), i
            assert tokens == [int(r.argmax()) for r in full[len(PROMPT) - 1:]]
            assert close(session.prefill(OTHER), eager(model, OTHER))
        else:
            full = session.prefill(PROMPT + tokens[:-1])  # the same weights without the cache
            assert close(np.stack(steps), full[len(PROMPT):], QUANTIZED_CACHE_TOLERANCE)
            error = np.abs(first - fp32).max() / np.abs(fp32).max()
            assert 0 < error < 0.5, error  # quantized, and near the float model
            session.prefill(OTHER)
        assert close(session.prefill(PROMPT), first)  # a fresh start: nothing of OTHER left in the cache
        # as an app starts (the timed time to first token): the last position only, and the same cache after it
        # (a quantized kernel may round one position's head apart from the whole prompt's: its tolerance)
        tolerance = 1e-4 if variant.promise == Promise.FLOAT else QUANTIZED_CACHE_TOLERANCE
        last = session.first(OTHER)
        assert last.shape == (VOCAB,) and last.dtype == np.float32 and close(last, session.prefill(OTHER)[-1], tolerance)
        session.first(PROMPT)
        assert close(np.stack([session.decode(t) for t in tokens[:3]]), np.stack(steps[:3]), tolerance)
        session.first(PROMPT)  # the timed loop's step: the same cache, its logits left in the engine
        assert session.step(tokens[0]) is None and close(session.decode(tokens[1]), steps[1], tolerance)
        assert session.prefill(list(range(MAX_LEN - 1))).shape == (MAX_LEN - 1, VOCAB)
        with pytest.raises(ConfigError, match=f"prefill takes 1 to {MAX_LEN - 1}"):
            session.prefill(list(range(MAX_LEN)))
    finally:
        session.close()


SLOW_GROUP_BUILDS = {"executorch-8da4w"}
"""A second ExecuTorch 8da4w build of the tiny model is 25-45 s of one core (ExecuTorch's XNNPACK lowering passes:
22 of its 26 s), the slowest test of the default suite: run with -m slow.  Its group-32 file stays in the default
suite (the contract test, and tests/backends/executorch against torchao's eager model)."""
GROUPED = [pytest.param(v.name, marks=pytest.mark.slow) if v.name in SLOW_GROUP_BUILDS else v.name
           for v in generation_variants() if v.groups]


@pytest.mark.parametrize("name", GROUPED)
def test_a_variant_builds_each_group_it_offers(name, decoder_file, tiny_llama):
    from mobilize.compare.decoder_worker import file_bytes
    from mobilize.tune.decoder import ladder_groups, linear_in_features

    variant, stock = decoder_file(name)
    fitting = ladder_groups(variant.groups, linear_in_features(tiny_llama), variant.groups_pad)
    other = [g for g in fitting if g != 32]  # every engine's stock group is 32
    if not other:
        pytest.skip(f"{name}: only group 32 divides the tiny model's linears (offers {variant.groups})")
    grouped, path = decoder_file(f"{name}@g{other[-1]}")
    assert grouped.group == other[-1] and file_bytes(path) != file_bytes(stock)
    session = grouped.load(path, 1, MAX_LEN)
    try:
        assert np.isfinite(session.prefill(PROMPT)).all()
    finally:
        session.close()
