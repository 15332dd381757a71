"""Train the default decoder: a small Llama (transformers) with its own byte-level BPE, on the stdlib's source.

The corpus is the Python standard library's own ``.py`` files (no downloads), split by file into train and
held-out (``mobilize.zoo.tiny_lm.corpus_files``).  Writes ``model.safetensors`` (float16), ``tokenizer.json``,
and ``config.json`` into src/mobilize/zoo/weights/tiny_lm/ and prints the held-out perplexity next to the
uniform one (the vocabulary size).  Seeded.  1200 steps of 16 x 256 tokens: 0.6-1 s a step on 2 free CPU cores
(12-20 minutes); the shipped weights took 39 s on one H200 (``--device cuda``, ``--stdlib`` a copy of this
machine's Python 3.11 standard library), with the CPU run's losses to 3 digits over the 300 steps both ran.

    .venv/bin/python scripts/train_tiny_lm.py [--steps 1200] [--threads 2] [--device cuda]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch

from mobilize.zoo import tiny_lm

# The shape of the model: ~3.5M parameters, ~7 MB in float16.
MODEL = dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=tiny_lm.SEQ_LEN, rope_theta=10000.0,
             tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=0)


def train_tokenizer(vocab_size: int, root: Path | None):
    """Byte-level BPE (GPT-2's pre-tokenizer, every byte in the alphabet) on the train files only."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[tiny_lm.END_OF_TEXT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator((tiny_lm.read_source(p) for p in tiny_lm.corpus_files("train", root)), trainer)
    return tokenizer


def train_stream(tokenizer, root: Path | None) -> torch.Tensor:
    """Every train file's ids, each followed by end-of-text, in path order: one long int64 stream."""
    eot = tokenizer.token_to_id(tiny_lm.END_OF_TEXT)
    texts = [tiny_lm.read_source(p) for p in tiny_lm.corpus_files("train", root)]
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(texts):
        ids += encoding.ids + [eot]
    return torch.tensor(ids, dtype=torch.int64)


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, batch: int = 16) -> float:
    model.eval()
    total = 0.0
    for i in range(0, len(ids), batch):
        chunk = ids[i:i + batch].to(model.device)
        total += float(model(input_ids=chunk, labels=chunk, use_cache=False).loss) * len(chunk)
    model.train()
    return math.exp(total / len(ids))


def save(model, tokenizer, out: Path) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()
             if not (model.config.tie_word_embeddings and k == "lm_head.weight")}
    save_file(state, str(out / "model.safetensors"))
    tokenizer.save(str(out / "tokenizer.json"))
    for name, text in tiny_lm.folder_files(tokenizer.get_vocab_size(), MODEL).items():  # config.json and the rest
        (out / name).write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eval-sequences", type=int, default=128)
    parser.add_argument("--out", default=str(tiny_lm.WEIGHTS_DIR))
    parser.add_argument("--device", default="cpu", help="torch device to train on (cpu, cuda)")
    parser.add_argument("--stdlib", type=Path, default=None,
                        help="a copy of a standard library to read (default: this Python's)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))
    torch.manual_seed(0)
    start = time.time()
    root = args.stdlib
    tokenizer = train_tokenizer(args.vocab, root)
    stream = train_stream(tokenizer, root)
    held_out = tiny_lm.held_out_ids(args.eval_sequences, tiny_lm.SEQ_LEN, tokenizer, root)
    vocab = tokenizer.get_vocab_size()
    print(f"tokenizer: {vocab} tokens; train {len(stream)} tokens from {len(tiny_lm.corpus_files('train', root))} files, "
          f"held-out {held_out.numel()} tokens from {len(tiny_lm.corpus_files('held-out', root))} files "
          f"({time.time() - start:.0f} s)", flush=True)
    model = _fresh_model(vocab).to(args.device)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    gen = torch.Generator().manual_seed(0)
    window = tiny_lm.SEQ_LEN
    model.train()
    for step in range(1, args.steps + 1):
        starts = torch.randint(0, len(stream) - window, (args.batch,), generator=gen)
        batch = torch.stack([stream[s:s + window] for s in starts.tolist()])
        batch = batch.to(args.device)
        loss = model(input_ids=batch, labels=batch, use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == args.steps:
            print(f"step {step}/{args.steps}: train loss {loss.item():.3f} ({time.time() - start:.0f} s)", flush=True)
        if step % 500 == 0 and step != args.steps:
            print(f"  held-out perplexity {perplexity(model, held_out[:32]):.2f}", flush=True)
    model.eval()
    save(model.cpu(), tokenizer, Path(args.out))
    size_mb = (Path(args.out) / "model.safetensors").stat().st_size / 1e6
    shipped = tiny_lm.build(Path(args.out))  # the saved float16 weights, as the zoo loads them
    ppl = perplexity(shipped.lm, held_out)
    print(f"held-out perplexity {ppl:.2f} vs uniform {vocab} ({held_out.shape[0]} sequences x {window} tokens); "
          f"{time.time() - start:.0f} s -> {args.out} ({size_mb:.2f} MB)")


def _fresh_model(vocab: int):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_lm.build_config(None, vocab_size=vocab, **MODEL))


if __name__ == "__main__":
    main()
