"""Issue #48 item 10: a conv with string padding (``padding='same'``) made eager int8 fail at convert, after
calibration, with only torch's "quantized::conv2d_prepack() Expected a value of type 'List[int]' for argument
'padding' but instead found type 'tuple'" (the tuple is ``('same', 'same')``).  Now the padding is written as the
numbers it means; a padding no number expresses is refused before calibration, each conv named, with a route."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mobilize.core.context import Context
from mobilize.core.errors import UnsupportedModelError
from mobilize.core.inputs import InputSpec
from mobilize.passes import PASSES


class SamePadded(nn.Module):
    def __init__(self, stubs: bool, kernel: int = 3, mode: str = "zeros"):
        super().__init__()
        torch.manual_seed(0)
        if stubs:
            self.quant, self.dequant = torch.ao.quantization.QuantStub(), torch.ao.quantization.DeQuantStub()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.block = nn.Sequential(nn.Conv2d(8, 8, kernel, padding="same", padding_mode=mode), nn.ReLU())
        self.valid = nn.Conv2d(8, 4, (1, 3), padding="valid", dilation=(1, 2))

    def forward(self, x):
        x = self.quant(x) if hasattr(self, "quant") else x
        x = self.valid(self.block(self.stem(x)))
        return self.dequant(x) if hasattr(self, "dequant") else x


def quantize(model: nn.Module) -> tuple[nn.Module, Context]:
    ctx = Context(input_specs=[InputSpec((1, 3, 16, 16))])
    cls = PASSES.get("quantize")
    return cls(cls.Config(engine="x86", calibration_samples=4))(model, ctx), ctx


@pytest.mark.parametrize("stubs", [True, False], ids=["eager", "fx"])
def test_same_and_valid_padding_quantize_as_the_numbers_they_mean(stubs):
    model = SamePadded(stubs).eval()
    q, ctx = quantize(model)
    assert model.block[0].padding == "same"  # the user's model is left as it was
    assert any("string padding written as numbers" in n and "block.0 (1, 1)" in n and "valid (0, 0)" in n
               for n in ctx.notes), ctx.notes
    x = torch.rand(1, 3, 16, 16)
    with torch.no_grad():
        ref, got = model(x), q(x)
    assert got.shape == ref.shape == (1, 4, 16, 12)
    assert float((got - ref).pow(2).mean() / ref.pow(2).mean()) < 0.05  # int8 error, not another function


@pytest.mark.parametrize("kernel, mode, said", [
    (2, "zeros", "'block.0' (padding='same' over kernel (2, 2) pads one side more)"),
    (3, "replicate", "'block.0' (padding_mode 'replicate')")])
def test_a_padding_int8_conv_cannot_take_is_refused_before_calibration_naming_the_conv(kernel, mode, said):
    with pytest.raises(UnsupportedModelError) as info:
        quantize(SamePadded(True, kernel, mode).eval())
    assert said in str(info.value) and "conv2d_prepack" not in str(info.value)
    assert "executorch-int8" in info.value.hint and "nn.ZeroPad2d" in info.value.hint
