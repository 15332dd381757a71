"""Train the default model: MobileNetV2 (width 0.5) on scikit-learn's digits, upscaled to 96x96 RGB.

Writes src/mobilize/zoo/weights/digits_mobilenet_v2.pt (a state_dict, loaded with
weights_only=True) and prints the float held-out accuracy on the fixed digits:test split.
Takes a few minutes on 2 CPU cores.

    .venv/bin/python scripts/train_default_model.py [--epochs 12]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

from mobilize.sources.data import open_data
from mobilize.zoo.digits_mobilenet_v2 import INPUT_SPEC, WEIGHTS, build_untrained


def evaluate(model: nn.Module, split: str) -> float:
    model.eval()
    correct = total = 0
    with torch.inference_mode():
        for x, y in open_data(split).batches(INPUT_SPEC, batch_size=128):
            correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    return 100.0 * correct / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--out", default=str(WEIGHTS))
    args = parser.parse_args()
    torch.manual_seed(0)
    model = build_untrained()
    batches = list(open_data("digits:train").batches(INPUT_SPEC, batch_size=32))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=4e-3, total_steps=args.epochs * len(batches))
    gen = torch.Generator().manual_seed(0)
    start = time.time()
    for epoch in range(args.epochs):
        model.train()
        for i in torch.randperm(len(batches), generator=gen).tolist():
            x, y = batches[i]
            # Small random shifts, so the model does not just memorise pixel positions.
            dx, dy = torch.randint(-6, 7, (2,), generator=gen).tolist()
            x = torch.roll(x, shifts=(dy, dx), dims=(2, 3))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
        print(f"epoch {epoch + 1}/{args.epochs}: held-out top-1 {evaluate(model, 'digits:test'):.2f}% "
              f"({time.time() - start:.0f} s)", flush=True)
    model.eval()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), args.out)
    print(f"float held-out accuracy (digits:test, {len(open_data('digits:test'))} images): "
          f"{evaluate(model, 'digits:test'):.2f}%  -> {args.out} ({Path(args.out).stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
