"""Passes: automatic fusion, channels-last, quantization (static/dynamic, eager/FX, interfaces)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mobilize.core.errors import ConfigError, UnsupportedModelError
from mobilize.passes import PASSES
from mobilize.core.context import Context
from mobilize.passes.quantize import QuantizeConfig
from mobilize.sources.data import open_data
from mobilize.core.inputs import InputSpec
from mobilize.zoo import ZOO


def run_pass(name: str, module: nn.Module, ctx: Context, **options) -> nn.Module:
    cls = PASSES.get(name)
    return cls(cls.Config(**options))(module, ctx)


def test_fuse_finds_every_conv_bn_in_mobilenet_v2():
    model = ZOO.get("mobilenet_v2").build(width_mult=0.5)
    n_bn = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    ctx = Context()
    fused = run_pass("fuse", model, ctx)
    assert n_bn == 52
    assert ctx.fused == {"conv_bn": 52, "conv_bn_relu": 35}
    assert not any(isinstance(m, nn.BatchNorm2d) for m in fused.modules())
    assert sum(isinstance(m, torch.ao.nn.intrinsic.ConvReLU2d) for m in fused.modules()) == 35
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules()), "input model must not be modified"
    x = torch.randn(2, 3, 96, 96)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), model(x), atol=1e-5, rtol=0)


class HandWritten(nn.Module):
    """Modules wired in forward (not Sequential), a functional ReLU, Linear-ReLU, a shared conv output."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.a_bn = nn.BatchNorm2d(8)
        self.a_act = nn.ReLU()
        self.b = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.b_bn = nn.BatchNorm2d(8)
        self.c = nn.Conv2d(8, 8, 1)
        self.c_bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 16)
        self.fc_act = nn.ReLU()
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = self.a_act(self.a_bn(self.a(x)))
        x = torch.relu(self.b_bn(self.b(x)))
        y = self.c(x)
        x = self.c_bn(y) + y  # conv output read twice: BN cannot be folded
        x = x.mean((2, 3))
        return self.head(self.fc_act(self.fc(x)))


def randomize_bn(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
    return model.eval()


def test_fuse_hand_written_forward_and_reasons():
    model = randomize_bn(HandWritten())
    ctx = Context()
    fused = run_pass("fuse", model, ctx)
    assert ctx.fused == {"conv_bn": 2, "conv_bn_relu": 1, "linear_relu": 1}
    notes = "\n".join(ctx.notes)
    assert "ReLU after b_bn is a function call" in notes
    assert "c: its output feeds more than one op" in notes
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), model(x), atol=1e-5, rtol=0)


class NotTraceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())

    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: FX cannot trace this
            return self.body(x)
        return -self.body(x)


def test_fuse_falls_back_to_sequentials_when_not_traceable():
    model = randomize_bn(NotTraceable())
    ctx = Context()
    fused = run_pass("fuse", model, ctx)
    assert "not FX-traceable" in ctx.notes[0]
    assert ctx.fused == {"conv_bn": 1, "conv_bn_relu": 1}
    x = torch.rand(1, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), model(x), atol=1e-5, rtol=0)


def test_fuse_after_quantize_is_refused():
    ctx = Context(applied=["quantize"])
    with pytest.raises(ConfigError, match="put fuse before quantize"):
        run_pass("fuse", nn.Sequential(nn.Conv2d(1, 1, 1)), ctx)


def test_channels_last_declares_input_format():
    ctx = Context(input_specs=[InputSpec((1, 3, 8, 8))])
    model = run_pass("channels_last", nn.Sequential(nn.Conv2d(3, 4, 3)).eval(), ctx)
    assert ctx.input_specs[0].memory_format == "channels_last"
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)


# -- quantization on real data ---------------------------------------------------------------

class DigitsNet(nn.Module):
    """A user-style CNN: no quant stubs, a plain `x + y` residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.res = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.res(x)
        x = self.down(x).mean((2, 3))
        return self.fc(x)


DIGITS_SPEC = InputSpec((1, 3, 8, 8))


@pytest.fixture(scope="module")
def digits_model() -> nn.Module:
    torch.manual_seed(0)
    model = DigitsNet()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batches = list(open_data("digits:train").batches(DIGITS_SPEC, batch_size=32))
    model.train()
    for _ in range(5):
        for x, y in batches:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return model.eval()


def accuracy(model, source: str = "digits:test") -> float:
    correct = total = 0
    with torch.no_grad():
        for x, y in open_data(source).batches(DIGITS_SPEC, batch_size=128):
            correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    return 100.0 * correct / total


@pytest.mark.parametrize("engine", ["x86", "qnnpack"])
def test_static_int8_keeps_digits_accuracy(digits_model, engine):
    float_acc = accuracy(digits_model)
    assert float_acc > 90, "the test model must learn digits for the check to mean anything"
    ctx = Context(input_specs=[DIGITS_SPEC], data=open_data("digits:train"))
    fused = run_pass("fuse", digits_model, ctx)
    quantized = run_pass("quantize", fused, ctx, engine=engine, calibration_samples=64)
    assert "FX graph mode" in "\n".join(ctx.notes)
    assert any("deprecat" in n for n in ctx.notes), "the upstream deprecation must be reported"
    assert any(isinstance(m, torch.ao.nn.quantized.Conv2d) or "Quantized" in type(m).__name__
               for m in quantized.modules())
    int8_acc = accuracy(quantized)
    assert int8_acc >= float_acc - 2.0, (float_acc, int8_acc)


def test_interfaces_none_core_full(digits_model):
    x = torch.randn(1, 3, 8, 8)
    dtypes = {}
    for interface in ("none", "core", "full"):
        ctx = Context(input_specs=[DIGITS_SPEC], data=open_data("digits:train"))
        q = run_pass("quantize", run_pass("fuse", digits_model, ctx), ctx, interface=interface, engine="x86",
                     calibration_samples=16)
        if interface == "full":
            scale, zero_point = ctx.quant.input_qparams
            inp = torch.quantize_per_tensor(x, scale, zero_point, torch.quint8)
        else:
            inp = x
        with torch.no_grad():
            dtypes[interface] = (inp.dtype, q(inp).dtype)
    assert dtypes == {"none": (torch.float32, torch.float32), "core": (torch.float32, torch.float32),
                      "full": (torch.quint8, torch.quint8)}


def test_eager_mode_full_interface_on_quantizable_zoo_model():
    ctx = Context(input_specs=[InputSpec((1, 3, 32, 32))], data=open_data("sample-photos:8"))
    model = ZOO.get("toy_classifier").build(blocks=2, first=8, last=16, num_classes=10)
    q = run_pass("quantize", run_pass("fuse", model, ctx), ctx, interface="full", engine="x86", calibration_samples=8)
    assert "eager mode" in "\n".join(ctx.notes)
    scale, zp = ctx.quant.input_qparams
    out = q(torch.quantize_per_tensor(torch.randn(1, 3, 32, 32), scale, zp, torch.quint8))
    assert out.dtype == torch.quint8


def test_dynamic_quantization_of_linear_layers():
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).eval()
    ctx = Context(input_specs=[InputSpec((1, 64))])
    q = run_pass("quantize", model, ctx, mode="dynamic")
    assert sum(type(m).__name__ == "Linear" and "dynamic" in type(m).__module__ for m in q.modules()) == 2
    x = torch.randn(4, 64)
    with torch.no_grad():
        assert (q(x) - model(x)).abs().max() < 0.05


def test_dynamic_quantization_without_linear_layers_is_refused():
    with pytest.raises(UnsupportedModelError, match="no Linear/LSTM/GRU"):
        run_pass("quantize", nn.Sequential(nn.Conv2d(3, 3, 1)).eval(), Context(), mode="dynamic")


def test_qat_needs_labels():
    ctx = Context(input_specs=[DIGITS_SPEC], data=open_data("sample-photos:4"))
    with pytest.raises(ConfigError, match="labelled data"):
        run_pass("quantize", DigitsNet().eval(), ctx, mode="qat")


def test_qat_fine_tunes_and_converts(digits_model):
    ctx = Context(input_specs=[DIGITS_SPEC], data=open_data("digits:train"))
    q = run_pass("quantize", run_pass("fuse", digits_model, ctx), ctx, mode="qat", engine="x86", qat_lr=1e-4)
    assert any("QAT fine-tuned" in n for n in ctx.notes)
    assert accuracy(q) >= accuracy(digits_model) - 2.0


def test_unknown_engine_is_refused():
    with pytest.raises(ConfigError, match="bad engine 'arm'"):
        from mobilize.core.config import build_config

        build_config(QuantizeConfig, {"engine": "arm"}, "quantize")


class MissingInt8Kernel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = nn.AdaptiveMaxPool2d(1)  # no QuantizedCPU kernel
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x):
        return self.dequant(self.pool(self.conv(self.quant(x))))


def test_missing_int8_kernel_is_named():
    ctx = Context(input_specs=[InputSpec((1, 3, 8, 8))])
    with pytest.raises(UnsupportedModelError, match="op aten::adaptive_max_pool2d.out gets an int8 tensor"):
        run_pass("quantize", MissingInt8Kernel().eval(), ctx, engine="x86")
