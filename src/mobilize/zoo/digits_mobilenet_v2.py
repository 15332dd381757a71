"""The default model: MobileNetV2 (width 0.5, 10 classes) trained on scikit-learn's digits at 96x96 RGB.

Trained by ``scripts/train_default_model.py`` (weights committed, ~2.8 MB, loaded with
``weights_only=True``).  Its labelled data is ``--data digits:test`` (the held-out split).

    >>> from mobilize.zoo import ZOO
    >>> m = ZOO.get("digits_mobilenet_v2").build()
    >>> m(torch.randn(1, 3, 96, 96)).shape
    torch.Size([1, 10])
"""

from __future__ import annotations

from pathlib import Path

import torch

from mobilize.core.errors import InternalError
from mobilize.core.inputs import InputSpec
from mobilize.zoo import ZOO
from mobilize.zoo.base import ZooModel
from mobilize.zoo.mobilenet_v2 import MobileNetV2

WEIGHTS = Path(__file__).parent / "weights" / "digits_mobilenet_v2.pt"
INPUT_SPEC = InputSpec((1, 3, 96, 96))


def build_untrained() -> MobileNetV2:
    torch.manual_seed(0)
    return MobileNetV2(num_classes=10, width_mult=0.5, dropout=0.1)


def build() -> torch.nn.Module:
    model = build_untrained()
    if not WEIGHTS.exists():
        raise InternalError(f"missing weights {WEIGHTS}; run scripts/train_default_model.py")
    model.load_state_dict(torch.load(WEIGHTS, map_location="cpu", weights_only=True))
    return model.eval()


ZOO.register("digits_mobilenet_v2")(
    ZooModel("digits_mobilenet_v2", build, (INPUT_SPEC,),
             "MobileNetV2 x0.5 trained on scikit-learn digits (96x96 RGB); the default model", 10)
)
