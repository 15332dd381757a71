"""The shipped decoder: it loads from the repo's files, and its held-out perplexity is far from a uniform guess's."""

from __future__ import annotations

import pytest
import torch

from mobilize.accuracy.generation import measure_tokens
from mobilize.zoo import ZOO
from mobilize.zoo import tiny_lm


@pytest.fixture(scope="module")
def model():
    return ZOO.get("tiny_lm").build()


def test_it_is_a_zoo_model_with_token_id_input(model):
    entry = ZOO.get("tiny_lm")
    assert "tiny_lm" in ZOO.names()
    assert entry.input_specs[0].dtype == "int64" and entry.input_specs[0].shape == (1, tiny_lm.SEQ_LEN)
    assert not model.training and all(p.dtype == torch.float32 for p in model.parameters())
    with torch.inference_mode():
        logits = model(torch.zeros(entry.input_specs[0].shape, dtype=torch.int64))
    assert logits.shape == (1, tiny_lm.SEQ_LEN, model.vocab_size) and torch.isfinite(logits).all()
    assert model.vocab_size == tiny_lm.load_tokenizer().get_vocab_size()


def test_the_shipped_files_are_small_and_half_precision():
    from safetensors import safe_open

    assert tiny_lm.WEIGHTS.stat().st_size < 10e6
    with safe_open(str(tiny_lm.WEIGHTS), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}


def test_the_split_is_by_file_and_fixed():
    train, held_out = tiny_lm.corpus_files("train"), tiny_lm.corpus_files("held-out")
    assert held_out and len(train) > 5 * len(held_out) and not set(train) & set(held_out)
    assert all("site-packages" not in p.parts and "test" not in p.parts for p in train + held_out)
    first = tiny_lm.held_out_ids(4, 32)
    assert first.dtype == torch.int64 and first.shape == (4, 32)
    assert torch.equal(first, tiny_lm.held_out_ids(4, 32))


def test_held_out_windows_span_files_with_a_tokenizer_that_has_no_end_of_text(tmp_path):
    """A user's tokenizer need not have tiny_lm's end-of-text token: the files then follow each other (a window
    across two files held None, and compare's float reference failed with a TypeError at --eval-len 128)."""
    from tokenizers import Tokenizer

    from tests.decoder_files import save_byte_tokenizer

    save_byte_tokenizer(tmp_path, 264)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tokenizer.token_to_id(tiny_lm.END_OF_TEXT) is None
    first_file = next(tiny_lm._held_out_stream(tokenizer, None))
    ids = tiny_lm.held_out_ids(2, len(first_file), tokenizer=tokenizer)  # the second window is in the next file
    assert ids.shape == (2, len(first_file)) and ids[0].tolist() == first_file and int(ids.max()) < 264


def test_held_out_perplexity_is_far_below_uniform(model):
    ids = tiny_lm.held_out_ids(16, tiny_lm.SEQ_LEN)
    with torch.inference_mode():
        logits = torch.cat([model(row[None]) for row in ids])
    m = measure_tokens(logits, logits, ids)
    assert m.reference_ppl < 0.2 * m.vocab_size and not m.near_uniform
    assert m.top1_agreement == 1.0


def test_it_writes_python(model):
    from mobilize.bench.decoding import FullForward, greedy

    tokenizer = tiny_lm.load_tokenizer()
    prompt = tokenizer.encode("import os\n\n\ndef ").ids
    text = tokenizer.decode(greedy(FullForward(model.lm, 64), prompt, 12))
    assert text.strip() and "(" in text, text


def test_the_zoos_decoders_are_known_without_importing_torch():
    """Whether a zoo model is a decoder, and whether the name exists, is decided in the CLI's own process without
    importing the entry (and torch: 2-3 s there, for nothing - the model is built in a worker); the list agrees with
    what each entry declares."""
    import subprocess
    import sys

    from mobilize.zoo import DECODERS, ZOO

    assert {n for n in ZOO.names() if getattr(ZOO.get(n), "task", None) == "generation"} == DECODERS
    script = ("import sys\nfrom mobilize.sources.models import check_reference\n"
              "from mobilize.generation.detect import wants_generation\n"
              "print([wants_generation(None, check_reference(r)) for r in ('zoo:tiny_lm', 'zoo:conv_bn_relu')], "
              "'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["[True,", "False]", "False"], out

