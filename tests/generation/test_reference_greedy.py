"""The float reference's greedy continuations: decoded with transformers' cache, every token confirmed by a
cache-free forward, so a cache that disagrees with the model never decides a reference token."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from mobilize.generation.model import reference_greedy  # noqa: E402

VOCAB = 11


class CountingLM:
    """Cache-free: the next token is the last one plus one. With a cache, step ``wrong_step`` answers plus two
    instead (a cache that drifts from the model). Counts the tokens each kind of call ran over."""

    def __init__(self, wrong_step: int | None):
        self.wrong_step, self.cached_tokens, self.free_tokens = wrong_step, 0, 0

    def forward(self, input_ids, cache=None, use_cache=False):
        ids = input_ids[0].tolist()
        if use_cache:
            self.cached_tokens += len(ids)
            step = 0 if cache is None else cache + 1
            nxt = [(ids[-1] + (2 if step == self.wrong_step else 1)) % VOCAB]
            logits = torch.nn.functional.one_hot(torch.tensor([nxt]), VOCAB).float()
            return types.SimpleNamespace(logits=logits, cache=step)
        self.free_tokens += len(ids)
        logits = torch.nn.functional.one_hot((torch.tensor([ids]) + 1) % VOCAB, VOCAB).float()
        return types.SimpleNamespace(logits=logits, cache=None)

    __call__ = forward


def test_a_cache_that_agrees_costs_one_cache_free_forward():
    lm = CountingLM(wrong_step=None)
    assert reference_greedy(lm, [3, 4], 6) == [5, 6, 7, 8, 9, 10]
    assert lm.free_tokens == 2 + 6 - 1  # one forward over the prompt and the tokens but the last


def test_a_token_the_cache_got_wrong_is_the_cache_free_forwards_and_the_rest_decoded_again():
    lm = CountingLM(wrong_step=3)  # the cached path says 9 where the model says 8, and follows on from 9
    assert reference_greedy(lm, [3, 4], 6) == [5, 6, 7, 8, 9, 10]
    assert lm.free_tokens > 2 + 6 - 1  # a second confirming forward ran


def test_real_model_reference_equals_the_cache_free_greedy_decode(recwarn):
    from mobilize.bench.decoding import FullForward, greedy
    from mobilize.zoo import ZOO

    lm = ZOO.get("tiny_lm").build().lm
    prompt = list(range(40, 72))
    assert reference_greedy(lm, prompt, 24) == greedy(FullForward(lm, 64), prompt, 24)
    assert not [w for w in recwarn if "deprecated" in str(w.message)]  # transformers' current name for the cache


@pytest.mark.parametrize("text", [False, True])
def test_the_prompt_is_as_long_as_asked_beyond_the_held_out_windows(tmp_path, text):
    """``--prompt-len 200 --eval-len 32``: the timed prompt was the first window's head, so it was cut to 32 tokens
    (every TTFT of a prompt longer than the windows was a 32-token prefill); it is the held-out stream's first 200."""
    import inspect
    import json

    from mobilize.generation.model import prepare
    from mobilize.sources.reference import ModelRef

    settings = {"prompt_tokens": 200, "gen_tokens": 2, "eval_sequences": 2, "eval_tokens": 32,
                "eval_tokens_given": True, "continuations": 1, "max_len": 203, "text": None}
    if text:
        settings["text"] = str(tmp_path / "mine.txt")
        (tmp_path / "mine.txt").write_text(inspect.getsource(json) * 4)
    model = prepare(ModelRef.parse("zoo:tiny_lm"), tmp_path / "lm", settings)
    assert model.eval_ids.shape == (2, 32) and len(model.prompt) == 200
    assert model.prompt[:64] == model.eval_ids.reshape(-1).tolist()  # the same stream, read on
    assert len(model.decode_ids) == 2
